// Package discovery tracks the workers a process may call. Addresses come from a
// static list, Consul, or both (Set); the tracker asks each address who it is
// (WorkerService.Info) and keeps its event stream open, so a worker counts as a
// member exactly while its stream is up.
package discovery

import (
	"context"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// Observer hears what the tracker learns. Calls for one worker are serialized.
type Observer interface {
	// Update carries each message of a worker's event stream. An error ends the
	// stream; the tracker resubscribes, which brings a fresh snapshot.
	Update(w router.Worker, msg *workerv1.WatchEventsResponse) error
	// Leave says the worker's stream ended; it is no longer a member.
	Leave(w router.Worker)
}

// Dialer opens a client connection to a worker.
type Dialer func(addr string) (*grpc.ClientConn, error)

// Tracker keeps the membership of a set of worker addresses.
type Tracker struct {
	dial     Dialer
	observer Observer
	log      *slog.Logger
	retry    time.Duration

	mu      sync.Mutex
	members map[string]router.Worker // by address
	watches map[string]context.CancelFunc
	ready   chan struct{}
	pending int
}

// NewTracker returns a tracker; observer may be nil.
func NewTracker(dial Dialer, observer Observer, log *slog.Logger) *Tracker {
	return &Tracker{
		dial: dial, observer: observer, log: log, retry: 500 * time.Millisecond,
		members: map[string]router.Worker{}, watches: map[string]context.CancelFunc{}, ready: make(chan struct{}),
	}
}

// Workers returns the members now, sorted by id.
func (t *Tracker) Workers() []router.Worker {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]router.Worker, 0, len(t.members))
	for _, w := range t.members {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ByID finds a member by worker id.
func (t *Tracker) ByID(id string) (router.Worker, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.members {
		if w.ID == id {
			return w, true
		}
	}
	return router.Worker{}, false
}

// Ready is closed once every address set so far has joined at least once.
func (t *Tracker) Ready() <-chan struct{} { return t.ready }

// Set makes addrs the addresses to track, starting and stopping watches to match.
func (t *Tracker) Set(ctx context.Context, addrs []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
		if _, ok := t.watches[a]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		t.watches[a] = cancel
		t.pending++
		go t.watch(wctx, a)
	}
	for a, cancel := range t.watches {
		if !want[a] {
			cancel()
			delete(t.watches, a)
		}
	}
	if t.pending == 0 {
		t.closeReady()
	}
}

func (t *Tracker) closeReady() {
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
}

// watch keeps one worker's stream open until ctx ends, rejoining after failures.
func (t *Tracker) watch(ctx context.Context, addr string) {
	cc, err := t.dial(addr)
	if err != nil {
		t.log.Error("cannot dial worker", "peer_addr", addr, "error", err)
		return
	}
	defer cc.Close()
	client := workerv1.NewWorkerServiceClient(cc)
	counted := false
	for ctx.Err() == nil {
		err := t.session(ctx, client, addr, &counted)
		if ctx.Err() != nil {
			return
		}
		t.log.Warn("worker stream ended; retrying", "peer_addr", addr, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(t.retry):
		}
	}
}

func (t *Tracker) session(ctx context.Context, client workerv1.WorkerServiceClient, addr string, counted *bool) error {
	info, err := client.Info(ctx, &workerv1.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	wi := info.GetInfo()
	w := router.Worker{ID: wi.GetId(), Address: addr, Mode: wi.GetMode(), Policy: wi.GetPrefillPolicy(),
		TotalBlocks: int(wi.GetTotalBlocks()), Fingerprint: wi.GetLayout().GetModelFingerprint(), NoKVEvents: wi.GetNoKvEvents(), LendsPrefill: wi.GetLendsPrefill()}
	if port := wi.GetKvTransferPort(); port != 0 {
		if w.KVAddress, err = kvAddress(addr, port); err != nil {
			return err
		}
	}
	stream, err := client.WatchEvents(ctx, &workerv1.WatchEventsRequest{})
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	w.Draining = first.GetDraining()
	t.join(w, counted)
	t.log.Info("worker joined", "peer_addr", addr, "peer_id", w.ID, "mode", w.Mode.String(), "draining", w.Draining)
	defer t.leave(addr, w)
	for msg := first; ; {
		if msg.GetDraining() != w.Draining {
			w.Draining = msg.GetDraining()
			t.setDraining(addr, w.Draining)
			t.log.Info("worker draining changed", "peer_addr", addr, "peer_id", w.ID, "draining", w.Draining)
		}
		if p := msg.GetPrefillPolicy().GetPolicy(); p != "" && p != w.Policy {
			// A policy changed at run time (Consul KV) moves the worker between
			// gating classes: always-remote no longer prefills locally.
			t.log.Info("worker prefill policy changed", "peer_addr", addr, "peer_id", w.ID, "from", w.Policy, "to", p)
			w.Policy = p
			t.setPolicy(addr, p)
		}
		if t.observer != nil {
			if err := t.observer.Update(w, msg); err != nil {
				// The observer lost sync: a new subscription starts with a snapshot.
				// The worker stays a member meanwhile; it is only the index that waits.
				t.log.Warn("resubscribing for a snapshot", "peer_addr", addr, "peer_id", w.ID, "reason", err)
				stream.CloseSend()
				if stream, err = client.WatchEvents(ctx, &workerv1.WatchEventsRequest{}); err != nil {
					return err
				}
			}
		}
		if msg, err = stream.Recv(); err != nil {
			return err
		}
	}
}

func (t *Tracker) join(w router.Worker, counted *bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.members[w.Address] = w
	if !*counted {
		*counted = true
		t.pending--
		if t.pending == 0 {
			t.closeReady()
		}
	}
}

func (t *Tracker) setDraining(addr string, draining bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.members[addr]; ok {
		m.Draining = draining
		t.members[addr] = m
	}
}

func (t *Tracker) setPolicy(addr, policy string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.members[addr]; ok {
		m.Policy = policy
		t.members[addr] = m
	}
}

func (t *Tracker) leave(addr string, w router.Worker) {
	t.mu.Lock()
	delete(t.members, addr)
	t.mu.Unlock()
	if t.observer != nil {
		t.observer.Leave(w)
	}
	t.log.Info("worker left", "peer_addr", addr, "peer_id", w.ID)
}

// kvAddress is where the KV transfer port of the worker reached at addr listens:
// the same host (as this process reaches it), on port.
func kvAddress(addr string, port uint32) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10)), nil
}
