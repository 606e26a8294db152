package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/planner"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/consul"
)

// policy is a runtime policy in Consul KV: its key, and the check a new value
// must pass, the one the services watching the key apply.
type policy struct {
	key   string
	check func([]byte) error
}

func policyOf(which string) (policy, error) {
	switch which {
	case "router":
		return policy{consul.RouterConfigKey, func(b []byte) error {
			_, err := consul.Overlay(router.DefaultParams(), b, router.Params.Validate)
			return err
		}}, nil
	case "decode":
		return policy{consul.DecodeConfigKey, func(b []byte) error {
			_, err := consul.Overlay(decode.DefaultParams(), b, decode.Params.Validate)
			return err
		}}, nil
	case "planner":
		return policy{consul.PlannerConfigKey, func(b []byte) error {
			_, err := planner.ParsePolicy(b)
			return err
		}}, nil
	}
	return policy{}, fmt.Errorf("config: %q: want router, decode or planner", which)
}

// GetPolicy prints on w the runtime policy of which ("router" or "decode") that
// the Consul agent at addr holds, reading with the ACL token in tokenFile (or,
// when that is empty, the environment's CONSUL_HTTP_TOKEN_FILE or CONSUL_HTTP_TOKEN).
func GetPolicy(ctx context.Context, addr, tokenFile, which string, w io.Writer) error {
	p, err := policyOf(which)
	if err != nil {
		return err
	}
	kv, err := consulKV(addr, tokenFile)
	if err != nil {
		return err
	}
	pair, _, err := kv.Get(p.key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("config get %s: %w", p.key, err)
	}
	if pair == nil {
		fmt.Fprintf(w, "%s is not set: the services use their flags\n", p.key)
		return nil
	}
	fmt.Fprintln(w, string(pair.Value))
	return nil
}

// CheckPolicy checks value, a JSON object, as the runtime policy of which
// ("router" or "decode") exactly as the services watching its key will, and says
// what is wrong with it.
func CheckPolicy(which string, value []byte) error {
	_, err := checkPolicy(which, value)
	return err
}

func checkPolicy(which string, value []byte) (policy, error) {
	p, err := policyOf(which)
	if err != nil {
		return p, err
	}
	if !json.Valid(value) {
		return p, errors.New("config set: the value is not valid JSON")
	}
	if err := p.check(value); err != nil {
		return p, fmt.Errorf("config set %s: %w", p.key, err)
	}
	return p, nil
}

// SetPolicy writes value, a JSON object, as the runtime policy of which, after
// checking it the way the services will (CheckPolicy); it says what it wrote on w.
func SetPolicy(ctx context.Context, addr, tokenFile, which string, value []byte, w io.Writer) error {
	p, err := checkPolicy(which, value)
	if err != nil {
		return err
	}
	kv, err := consulKV(addr, tokenFile)
	if err != nil {
		return err
	}
	if _, err := kv.Put(&api.KVPair{Key: p.key, Value: value}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("config set %s: %w", p.key, err)
	}
	fmt.Fprintf(w, "%s = %s\n", p.key, value)
	return nil
}

func consulKV(addr, tokenFile string) (*api.KV, error) {
	client, err := consul.NewAPI(addr, tokenFile)
	if err != nil {
		return nil, err
	}
	return client.KV(), nil
}
