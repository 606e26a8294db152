.PHONY: test build run generate lint

# The one test command: format, vet, buf lint, generated code, and every test.
test:
	./scripts/test.sh

build:
	CGO_ENABLED=0 go build -o bin/tandem ./cmd/tandem

run:
	go run ./cmd/tandem up

generate:
	go tool buf generate

lint:
	go tool buf lint
	go vet ./...
