package consul

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// WatchServices calls set with the addresses of the passing instances of the named
// services whenever they change, using blocking queries. While Consul is
// unreachable the last membership stays in force; errors are logged and counted
// and the query retried with backoff.
func (c *Client) WatchServices(ctx context.Context, names []string, set func(addrs []string)) {
	var mu sync.Mutex
	current := make([][]string, len(names))
	changed := make(chan struct{}, 1)
	for i, name := range names {
		go c.watchService(ctx, name, func(addrs []string) {
			mu.Lock()
			current[i] = addrs
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}
	var last []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		var all []string
		mu.Lock()
		for i := range names {
			all = append(all, current[i]...)
		}
		mu.Unlock()
		slices.Sort(all)
		if !slices.Equal(all, last) {
			last = all
			set(slices.Clone(all))
		}
	}
}

func (c *Client) watchService(ctx context.Context, name string, update func([]string)) {
	c.WatchInstances(ctx, name, func(is []Instance) {
		addrs := make([]string, 0, len(is))
		for _, i := range is {
			addrs = append(addrs, i.Addr)
		}
		update(addrs)
	})
}

// Instance is one passing instance of a service in the catalog.
type Instance struct {
	// ID is the service id it registered with: a worker's id.
	ID   string
	Addr string // host:port
	Meta map[string]string
}

// WatchInstances calls update with the passing instances of the named service
// after every answer of a blocking query, the first one included (even when it
// lists none, so that a caller knows Consul has answered), until ctx ends. While
// Consul is unreachable the last answer stays in force; errors are logged and
// counted and the query retried with backoff.
func (c *Client) WatchInstances(ctx context.Context, name string, update func([]Instance)) {
	var index uint64
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx)
		entries, meta, err := c.API.Health().Service(name, "", true, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.metrics.errors.WithLabelValues("watch").Inc()
			c.log.Warn("consul: watch failed; keeping the last known members", "consul_service", name, "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		if meta.LastIndex < index {
			index = 0 // the index went backwards (agent restart): start over
		} else {
			index = meta.LastIndex
		}
		is := make([]Instance, 0, len(entries))
		for _, e := range entries {
			host := e.Service.Address
			if host == "" {
				host = e.Node.Address
			}
			is = append(is, Instance{ID: e.Service.ID, Addr: net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), Meta: e.Service.Meta})
		}
		c.metrics.members.WithLabelValues(name).Set(float64(len(is)))
		c.metrics.watchUpdates.WithLabelValues(name).Inc()
		update(is)
	}
}

// WatchKey calls apply with the value of key whenever it changes. A value apply
// rejects is logged and counted, and the last good one stays in force.
func (c *Client) WatchKey(ctx context.Context, key string, apply func([]byte) error) {
	c.watchKey(ctx, key, false, apply)
}

// WatchState is WatchKey for state a service publishes for the others (the
// planner's plan): apply is called with nil when the key is deleted, and a
// value applied is counted, not logged, for it changes at every publication.
func (c *Client) WatchState(ctx context.Context, key string, apply func([]byte) error) {
	c.watchKey(ctx, key, true, apply)
}

func (c *Client) watchKey(ctx context.Context, key string, state bool, apply func([]byte) error) {
	var index uint64
	var last []byte
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx)
		pair, meta, err := c.API.KV().Get(key, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.metrics.errors.WithLabelValues("kv_watch").Inc()
			c.log.Warn("consul: config watch failed; keeping the last good config", "key", key, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
		if pair == nil && state && last != nil {
			last = nil
			if err := apply(nil); err != nil {
				c.log.Error("consul: applying the deletion of a key failed", "key", key, "error", err)
			}
			continue
		}
		if pair == nil || bytes.Equal(pair.Value, last) {
			continue
		}
		last = slices.Clone(pair.Value)
		if err := apply(pair.Value); err != nil {
			c.metrics.configReject.WithLabelValues(key).Inc()
			c.log.Error("consul: rejected runtime config; the last good one stays", "key", key, "error", err)
			continue
		}
		c.metrics.configApplied.WithLabelValues(key).Inc()
		if !state {
			c.log.Info("consul: applied runtime config", "key", key, "value", string(pair.Value))
		}
	}
}
