package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/internal/testutil"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// plannerRig is a fleet for the planner's tests: a real Consul agent, one
// decode worker (decode-p1) and lenders (lender-1, ...), sim engines; the
// test starts the routers and the frontend it needs.
type plannerRig struct {
	t       *testing.T
	a       *consulAgent
	decode  *service
	lenders []*service
}

// The planner's settings in these tests: quick to act on the few requests a
// loaded test machine serves, which the defaults would average away.
var twitchyPlanner = []string{"--planner", "--planner-interval", "300ms", "--planner-dwell", "1s",
	"--planner-hysteresis", "0.05", "--planner-smoothing", "0.5", "--planner-output-tokens", "64"}

func startPlannerRig(t *testing.T, lenders int, workerArgs ...string) *plannerRig {
	t.Helper()
	r := &plannerRig{t: t, a: startConsul(t)}
	sim := append([]string{"--engine", "sim"}, workerArgs...)
	r.decode = runService(t, r.with(append([]string{"decode", "--listen", "127.0.0.1:0", "--id", "decode-p1"}, sim...)...)...)
	for i := range lenders {
		r.lenders = append(r.lenders, runService(t, r.with(append([]string{"decode", "--mode", "aggregated", "--lend-prefill", "--kv-listen", "127.0.0.1:0",
			"--listen", "127.0.0.1:0", "--id", fmt.Sprintf("lender-%d", i+1)}, sim...)...)...))
	}
	testutil.WaitForWithin(t, 30*time.Second, "the workers passing in Consul", func() bool { return len(passing(t, r.a, "tandem-decode")) == 1+lenders })
	return r
}

// with adds the Consul flags. Checks with room to spare: on a loaded 2-core
// machine a 400 ms timeout can mark a busy service critical, which is not what
// these tests are about.
func (r *plannerRig) with(args ...string) []string {
	return append(args, "--consul", r.a.Addr, "--check-interval", "2s", "--check-timeout", "2s")
}

func (r *plannerRig) router(args ...string) *service {
	r.t.Helper()
	return runService(r.t, r.with(append([]string{"router", "--listen", "127.0.0.1:0"}, args...)...)...)
}

func (r *plannerRig) frontend() *service {
	r.t.Helper()
	fe := runService(r.t, r.with("frontend", "--listen", "127.0.0.1:0")...)
	waitHealthy(r.t, fe.addr)
	return fe
}

// config runs tandem config against the rig's Consul.
func (r *plannerRig) config(args ...string) ([]byte, error) {
	return exec.Command(tandemBin, append([]string{"config", "--consul", r.a.Addr}, args...)...).CombinedOutput()
}

// planDoc is the plan the planner published, as an operator reads it.
type planDoc struct {
	Reason   string            `json:"reason"`
	Roles    map[string]string `json:"roles"`
	Pinned   bool              `json:"pinned"`
	Switched bool              `json:"switched"`
	At       time.Time         `json:"at"`
	Pin      *struct {
		Prefill int `json:"prefill"`
	} `json:"pin"`
	Shape struct {
		Prefill int `json:"Prefill"`
	} `json:"shape"`
	Switches []struct {
		At     time.Time         `json:"at"`
		Reason string            `json:"reason"`
		Roles  map[string]string `json:"roles"`
	} `json:"switches"`
}

func (r *plannerRig) plan() (planDoc, bool) {
	var p planDoc
	pair, _, err := r.a.API.KV().Get("tandem/planner/plan", nil)
	if err != nil || pair == nil {
		return p, false
	}
	return p, json.Unmarshal(pair.Value, &p) == nil
}

func prefillRoles(roles map[string]string) int {
	n := 0
	for _, r := range roles {
		if r == "prefill" {
			n++
		}
	}
	return n
}

// fleetView is the first message of a router's fleet stream.
func fleetView(t *testing.T, addr string) *routerv1.WatchFleetResponse {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := routerv1.NewRouterServiceClient(cc).WatchFleet(ctx, &routerv1.WatchFleetRequest{})
	if err != nil {
		return nil
	}
	msg, err := s.Recv()
	if err != nil {
		return nil
	}
	return msg
}

// viewRoles are the lenders' roles a router applies, by worker id.
func viewRoles(msg *routerv1.WatchFleetResponse) map[string]string {
	roles := map[string]string{}
	for _, w := range msg.GetWorkers() {
		if r := w.GetRole(); r != "" {
			roles[w.GetWorker().GetId()] = r
		}
	}
	return roles
}

// plannerLoad is clients sending fresh prompts (no prefix cache to help)
// through a frontend until stopped, a share of them long.
type plannerLoad struct {
	longShare atomic.Int64 // in percent
	sent, bad atomic.Int64
	seq       atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	errs      []string
}

var (
	plannerShort = strings.Repeat("word ", 40)
	plannerLong  = strings.Repeat("a much longer prompt with many words in it ", 400)
)

func startPlannerLoad(t *testing.T, frontend string, clients int, longShare int64) *plannerLoad {
	l := &plannerLoad{stop: make(chan struct{})}
	l.longShare.Store(longShare)
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				n := l.seq.Add(1)
				body := plannerShort
				if n%100 < l.longShare.Load() {
					body = plannerLong
				}
				l.sent.Add(1)
				if _, err := plannerCompletion(frontend, fmt.Sprintf("request %d: %s", n, body), 16); err != nil {
					l.bad.Add(1)
					l.mu.Lock()
					l.errs = append(l.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
					l.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

// end stops the clients and waits for their last requests.
func (l *plannerLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// counts are the requests sent and failed so far, and the first errors.
func (l *plannerLoad) counts() (sent, bad int64, errs []string) {
	return l.sent.Load(), l.bad.Load(), l.errsFrom(0)
}

// errsFrom are up to five errors, from the from-th on.
func (l *plannerLoad) errsFrom(from int64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from = min(from, int64(len(l.errs)))
	return append([]string(nil), l.errs[from:min(int64(len(l.errs)), from+5)]...)
}

// served is where a completion ran, from its tandem field.
type served struct {
	DecodeWorker  string `json:"decode_worker"`
	PrefillWorker string `json:"prefill_worker"`
	PrefillPath   string `json:"prefill_path"`
	Finish        string
	Completion    int
}

// plannerCompletion sends one completion of at most maxTokens and says where it ran,
// or what went wrong.
func plannerCompletion(frontend, prompt string, maxTokens int) (served, error) {
	return plannerCompletionWith(frontend, prompt, maxTokens, false, 60*time.Second)
}

func plannerCompletionWith(frontend, prompt string, maxTokens int, ignoreEOS bool, timeout time.Duration) (served, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, _ := json.Marshal(struct {
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		IgnoreEOS bool   `json:"ignore_eos,omitempty"`
	}{prompt, maxTokens, ignoreEOS})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+frontend+"/v1/completions", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return served{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return served{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Tandem  served `json:"tandem"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
		return served{}, fmt.Errorf("answer %s: %v", body, err)
	}
	s := out.Tandem
	s.Finish, s.Completion = out.Choices[0].FinishReason, out.Usage.CompletionTokens
	return s, nil
}

// noBlocksHeld waits until no worker of the rig holds a block or runs anything.
func (r *plannerRig) noBlocksHeld() {
	r.t.Helper()
	for _, w := range append([]*service{r.decode}, r.lenders...) {
		testutil.WaitForWithin(r.t, 30*time.Second, w.addr+" holds no block", func() bool {
			st, ok := readPool(w.addr)
			return ok && st.active == 0 && st.running == 0 && st.waiting == 0
		})
	}
}
