package discovery_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/discovery"
)

// fakeInfo answers Info for addresses: a worker id, or nothing yet.
type fakeInfo struct {
	mu    sync.Mutex
	who   map[string]*workerv1.WorkerInfo
	asked map[string]int
}

func (f *fakeInfo) info(_ context.Context, addr string) (*workerv1.WorkerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[addr]++
	if w, ok := f.who[addr]; ok {
		return w, nil
	}
	return nil, errors.New("connection refused")
}

func (f *fakeInfo) set(addr string, w *workerv1.WorkerInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.who[addr] = w
}

func (f *fakeInfo) times(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[addr]
}

func prefillInfo(id string, kvPort uint32) *workerv1.WorkerInfo {
	return &workerv1.WorkerInfo{Id: id, Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL, KvTransferPort: kvPort}
}

func isReady(d *discovery.Directory) bool {
	select {
	case <-d.Ready():
		return true
	default:
		return false
	}
}

// A static address counts once it has said who it is; one that does not answer
// yet is asked again until it does, and the directory is Ready only then.
func TestDirectoryStatic(t *testing.T) {
	f := &fakeInfo{who: map[string]*workerv1.WorkerInfo{"10.0.0.1:9000": prefillInfo("p1", 9001)}, asked: map[string]int{}}
	d := discovery.NewDirectory(workerv1.WorkerMode_WORKER_MODE_PREFILL, f.info, false, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.SetStatic(ctx, []string{"10.0.0.1:9000", "10.0.0.2:9000"})
	testutil.WaitFor(t, "p1 known", func() bool { _, ok := d.ByID("p1"); return ok })
	testutil.WaitFor(t, "the silent address asked again", func() bool { return f.times("10.0.0.2:9000") >= 2 })
	if isReady(d) {
		t.Fatal("Ready while one static address has not answered")
	}
	if got := d.Awaiting(); !slices.Equal(got, []string{"10.0.0.2:9000"}) {
		t.Errorf("Awaiting() = %v", got)
	}
	f.set("10.0.0.2:9000", prefillInfo("p2", 0))
	select {
	case <-d.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not Ready after every static address answered")
	}
	want := []router.Worker{
		{ID: "p1", Address: "10.0.0.1:9000", KVAddress: "10.0.0.1:9001", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL},
		{ID: "p2", Address: "10.0.0.2:9000", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL},
	}
	if got := d.Workers(); !slices.Equal(got, want) {
		t.Errorf("Workers() = %+v, want %+v", got, want)
	}

	// p2 restarts under a new id: a lookup of the new id (the router suggests it)
	// misses once, and has the address asked again.
	f.set("10.0.0.2:9000", prefillInfo("p2b", 0))
	testutil.WaitFor(t, "p2b found after a miss", func() bool { _, ok := d.ByID("p2b"); return ok })
	if _, ok := d.ByID("p2"); ok {
		t.Error("the old id p2 is still known")
	}

	// An address no longer listed is dropped.
	d.SetStatic(ctx, []string{"10.0.0.1:9000"})
	if got := d.Workers(); len(got) != 1 || got[0].ID != "p1" {
		t.Errorf("Workers() after removing an address = %+v", got)
	}
}

// With Consul, the directory is Ready once Consul has answered, even with no
// prefill worker at all; its workers come with their KV transfer ports and cost
// no call.
func TestDirectoryCatalog(t *testing.T) {
	f := &fakeInfo{who: map[string]*workerv1.WorkerInfo{"10.0.0.1:9000": prefillInfo("p1", 0)}, asked: map[string]int{}}
	d := discovery.NewDirectory(workerv1.WorkerMode_WORKER_MODE_PREFILL, f.info, true, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.SetStatic(ctx, []string{"10.0.0.1:9000"})
	testutil.WaitFor(t, "p1 known", func() bool { _, ok := d.ByID("p1"); return ok })
	if isReady(d) {
		t.Fatal("Ready before Consul answered")
	}
	if got := d.Awaiting(); !slices.Equal(got, []string{"consul"}) {
		t.Errorf("Awaiting() = %v, want [consul]", got)
	}
	d.SetInstances(nil)
	if !isReady(d) {
		t.Fatal("not Ready after Consul answered with no prefill worker")
	}
	d.SetInstances([]discovery.Instance{{ID: "p3", Addr: "10.0.0.3:9000", KVPort: "9005"}, {ID: "p1", Addr: "10.0.0.1:9000"}})
	w, ok := d.ByID("p3")
	if !ok || w.KVAddress != "10.0.0.3:9005" || w.Mode != workerv1.WorkerMode_WORKER_MODE_PREFILL {
		t.Errorf("ByID(p3) = %+v, %v", w, ok)
	}
	if f.times("10.0.0.3:9000") != 0 {
		t.Error("a worker Consul lists was called")
	}
	if got := d.Workers(); len(got) != 2 {
		t.Errorf("Workers() = %+v; want p1 once and p3", got)
	}
	d.SetInstances(nil)
	if _, ok := d.ByID("p3"); ok {
		t.Error("p3 still known after Consul stopped listing it")
	}
}

// An empty static list with no Consul is a complete view at once.
func TestDirectoryEmpty(t *testing.T) {
	d := discovery.NewDirectory(workerv1.WorkerMode_WORKER_MODE_PREFILL, nil, false, logger)
	d.SetStatic(context.Background(), nil)
	if !isReady(d) {
		t.Fatal("an empty directory is not Ready")
	}
}

// Questions about one address asked while one is out share its answer, as the
// directories of tandem up's decode workers do; a failure is not kept.
func TestInfoCacheShares(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	fail := false
	c := discovery.NewInfoCache(func(_ context.Context, addr string) (*workerv1.WorkerInfo, error) {
		mu.Lock()
		calls++
		f := fail
		mu.Unlock()
		<-release
		if f {
			return nil, errors.New("refused")
		}
		return prefillInfo("p-"+addr, 0), nil
	}, time.Hour)
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if info, err := c.Info(context.Background(), "a"); err == nil {
				ids[i] = info.GetId()
			}
		}()
	}
	testutil.WaitFor(t, "the first question is out", func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 })
	time.Sleep(50 * time.Millisecond) // the others queue behind it
	close(release)
	wg.Wait()
	for i, id := range ids {
		if id != "p-a" {
			t.Fatalf("asker %d got %q", i, id)
		}
	}
	if calls != 1 {
		t.Errorf("%d calls for 20 questions at once; want them shared", calls)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	if _, err := c.Info(context.Background(), "b"); err == nil {
		t.Fatal("a failed answer reported as success")
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if info, err := c.Info(context.Background(), "b"); err != nil || info.GetId() != "p-b" {
		t.Errorf("after a failure, Info = %v, %v; want it asked again", info, err)
	}
}

// The first asker giving up does not fail those waiting on its question: they
// ask again under their own contexts.
func TestInfoCacheAskerGivesUp(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	c := discovery.NewInfoCache(func(ctx context.Context, addr string) (*workerv1.WorkerInfo, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			<-ctx.Done() // the first question hangs until its asker leaves
			return nil, ctx.Err()
		}
		return prefillInfo("p-"+addr, 0), nil
	}, time.Hour)
	first, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Info(first, "a"); done <- err }()
	testutil.WaitFor(t, "the first question is out", func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 })
	waiter := make(chan *workerv1.WorkerInfo, 1)
	go func() {
		info, err := c.Info(context.Background(), "a")
		if err != nil {
			t.Errorf("the waiter got %v, though its own context is live", err)
		}
		waiter <- info
	}()
	time.Sleep(50 * time.Millisecond) // the waiter queues behind the first question
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the asker who gave up got %v, want context.Canceled", err)
	}
	if info := <-waiter; info.GetId() != "p-a" {
		t.Errorf("the waiter got %v, want p-a asked again", info)
	}
}
