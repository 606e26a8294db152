package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/workersvc"
)

// runConfig reads and writes the runtime policy in Consul KV, checking a new value
// the way the services will before it is written.
func runConfig(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config", `config get|set router|decode ['{"field": value, ...}']`, stderr)
	var cc consul.Config
	fs.StringVar(&cc.Addr, "consul", "127.0.0.1:8500", "Consul agent HTTP address")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if e := getenv("CONSUL_HTTP_ADDR"); e != "" && !flagGiven(fs, "consul") && getenv("TANDEM_CONSUL") == "" {
		cc.Addr = strings.TrimPrefix(e, "http://")
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("config: want get or set, and router or decode")
	}
	op, which := fs.Arg(0), fs.Arg(1)
	var key string
	var check func([]byte) error
	switch which {
	case "router":
		key = consul.RouterConfigKey
		check = func(b []byte) error {
			_, err := consul.Overlay(router.DefaultParams(), b, router.Params.Validate)
			return err
		}
	case "decode":
		key = consul.DecodeConfigKey
		check = func(b []byte) error {
			base := decode.Params{Policy: decode.PolicyThreshold, ShortPrefillThreshold: workersvc.DefaultShortPrefillThreshold, ITLWeight: 0.25}
			_, err := consul.Overlay(base, b, decode.Params.Validate)
			return err
		}
	default:
		return fmt.Errorf("config: %q: want router or decode", which)
	}
	cfg := api.DefaultConfig()
	cfg.Address = cc.Addr
	client, err := api.NewClient(cfg)
	if err != nil {
		return err
	}
	kv := client.KV()
	switch op {
	case "get":
		pair, _, err := kv.Get(key, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("config get %s: %w", key, err)
		}
		if pair == nil {
			fmt.Fprintf(stdout, "%s is not set: the services use their flags\n", key)
			return nil
		}
		fmt.Fprintln(stdout, string(pair.Value))
		return nil
	case "set":
		if fs.NArg() != 3 {
			return errors.New(`config set: want one JSON object, e.g. '{"short_prefill_threshold": 128}'`)
		}
		value := []byte(fs.Arg(2))
		if !json.Valid(value) {
			return errors.New("config set: the value is not valid JSON")
		}
		if err := check(value); err != nil {
			return fmt.Errorf("config set %s: %w", key, err)
		}
		if _, err := kv.Put(&api.KVPair{Key: key, Value: value}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("config set %s: %w", key, err)
		}
		fmt.Fprintf(stdout, "%s = %s\n", key, value)
		return nil
	}
	return fmt.Errorf("config: %q: want get or set", op)
}
