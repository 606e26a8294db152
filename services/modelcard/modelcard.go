// Package modelcard reads the model card a worker publishes: the frontend learns
// its model from it, and the operator commands tokenize as the frontend does.
package modelcard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/gguf"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// MaxBytes bounds a model card: a 150k-token vocabulary with its merges is a few
// MB, beyond grpc-go's 4 MB default.
const MaxBytes = 64 << 20

// Fetch asks the worker behind cc for its model card.
func Fetch(ctx context.Context, cc grpc.ClientConnInterface) (*workerv1.ModelCard, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := workerv1.NewWorkerServiceClient(cc).ModelCard(ctx, &workerv1.ModelCardRequest{}, grpc.MaxCallRecvMsgSize(MaxBytes))
	if err != nil {
		return nil, fmt.Errorf("model card: %w", err)
	}
	return resp.GetCard(), nil
}

// FromRouter fetches the card of the first worker the router behind rc lists
// that answers, dialling workers with dial.
func FromRouter(ctx context.Context, rc grpc.ClientConnInterface, dial func(addr string) (*grpc.ClientConn, error)) (*workerv1.ModelCard, error) {
	list, err := routerv1.NewRouterServiceClient(rc).ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing workers: %w", err)
	}
	errs := []error{errors.New("no worker published a model card")}
	for _, w := range list.GetWorkers() {
		cc, err := dial(w.GetAddress())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.GetId(), err))
			continue
		}
		card, err := Fetch(ctx, cc)
		_ = cc.Close()
		if err == nil {
			return card, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", w.GetId(), err))
	}
	return nil, errors.Join(errs...)
}

// Tokenizer builds the tokenizer a card describes.
func Tokenizer(card *workerv1.ModelCard) (tokenizer.Tokenizer, error) {
	switch t := card.GetTokenizer().(type) {
	case *workerv1.ModelCard_TokenizerName:
		if t.TokenizerName != "cl100k_base" {
			return nil, fmt.Errorf("model card: unknown built-in tokenizer %q", t.TokenizerName)
		}
		return tokenizer.CL100K()
	case *workerv1.ModelCard_TokenizerGguf:
		f, err := gguf.Parse(t.TokenizerGguf)
		if err != nil {
			return nil, fmt.Errorf("model card: tokenizer: %w", err)
		}
		tok, err := tokenizer.FromGGUF(f)
		if err != nil {
			return nil, fmt.Errorf("model card: %w", err)
		}
		return tok, nil
	case *workerv1.ModelCard_TokenizerJson:
		tok, err := tokenizer.FromHuggingFace(t.TokenizerJson)
		if err != nil {
			return nil, fmt.Errorf("model card: %w", err)
		}
		return tok, nil
	}
	return nil, errors.New("model card: no tokenizer")
}
