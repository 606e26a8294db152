package enginecheck

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// batches collects decoded event batches and what they showed.
type batches struct {
	mu    sync.Mutex
	seen  EventsSeen
	encs  map[string]bool
	sizes map[int]bool
}

func (b *batches) add(payload []byte, replayed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch, err := kvevents.DecodeBatch(payload)
	if err != nil {
		b.seen.Bad++
		return
	}
	if replayed {
		b.seen.Replayed++
	} else {
		b.seen.Live++
	}
	if c := payload[0]; msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		b.encs["map"] = true
	} else {
		b.encs["array"] = true
	}
	for _, ev := range batch.Events {
		if ev.Kind == kvevents.BlockStored {
			b.sizes[ev.BlockSize] = true
		}
	}
}

// checkEvents subscribes for a window, sends a prompt of two blocks so that the
// engine has something to publish, asks the replay socket for what it holds,
// and reports the encoding and block size the batches carry.
func checkEvents(ctx context.Context, cfg Config, e *openaihttp.Engine, r *Report) {
	b := &batches{encs: map[string]bool{}, sizes: map[int]bool{}}
	sctx, stop := context.WithCancel(ctx)
	subErr := make(chan error, 1)
	go func() { subErr <- subscribe(sctx, cfg.KVEvents, b) }()
	// A SUB socket drops what is published before its subscription reaches the
	// publisher; the prompt waits a moment for it.
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
	req := engine.Request{ID: "tandem-probe-kv-events", Prompt: probePrompt(e, cfg.BlockSize), MaxTokens: 1}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	_, promptErr := e.Complete(pctx, req.ID, e.Body(req, false))
	cancel()
	select {
	case <-ctx.Done():
	case <-time.After(cfg.EventWindow):
	}
	// Asked after the window, the replay socket also holds what the engine
	// published late (simulators batch events for a while).
	if cfg.KVEvents.ReplayEndpoint != "" {
		err := replay(ctx, cfg.KVEvents.ReplayEndpoint, b)
		b.mu.Lock()
		b.seen.ReplayAnswers = err == nil
		if err != nil {
			b.seen.ReplayError = err.Error()
		}
		b.mu.Unlock()
	}
	stop()
	err := <-subErr
	b.mu.Lock()
	seen := b.seen
	for _, k := range []string{"array", "map"} {
		if b.encs[k] {
			seen.Encodings = append(seen.Encodings, k)
		}
	}
	for s := range b.sizes {
		seen.BlockSizes = append(seen.BlockSizes, s)
	}
	b.mu.Unlock()
	slices.Sort(seen.BlockSizes)
	r.KVEvents = &seen
	reportEvents(cfg, r, seen, err, promptErr)
}

func reportEvents(cfg Config, r *Report, seen EventsSeen, subErr, promptErr error) {
	ep := cfg.KVEvents.Endpoint
	switch {
	case subErr != nil:
		r.add("kv events", Warn, fmt.Sprintf("%s: %v", ep, subErr), "the worker keeps retrying; routing sees load only until it connects")
	case seen.Live == 0 && seen.Replayed == 0:
		detail := "none published within the window after a two-block prompt: check the engine's --kv-events-config and --kv-events-topic"
		if promptErr != nil {
			detail = "the prompt sent to provoke them failed: " + promptErr.Error()
		}
		r.add("kv events", Warn, fmt.Sprintf("%s: no batch within %s", ep, cfg.EventWindow), detail)
	default:
		r.add("kv events", OK, fmt.Sprintf("%d live, %d replayed; encoding %s", seen.Live, seen.Replayed, strings.Join(seen.Encodings, " and ")), "")
	}
	if seen.Bad > 0 {
		r.add("kv events format", Warn, fmt.Sprintf("%d batches not decodable", seen.Bad), "the worker skips them and resynchronises")
	}
	switch {
	case cfg.KVEvents.ReplayEndpoint == "":
		r.add("kv events replay", Skip, "no --kv-events-replay-endpoint", "a lost batch clears the worker's view instead of being replayed")
	case seen.ReplayAnswers && seen.ReplayWithTopic > 0:
		r.add("kv events replay", OK, cfg.KVEvents.ReplayEndpoint+" answers (topic, sequence, batch)",
			"with the live stream's topic frame, as TensorRT-LLM's does (vLLM's has none); the worker reads both")
	case seen.ReplayAnswers:
		r.add("kv events replay", OK, cfg.KVEvents.ReplayEndpoint+" answers", "")
	default:
		r.add("kv events replay", Warn, cfg.KVEvents.ReplayEndpoint+": "+seen.ReplayError, "a lost batch clears the worker's view instead of being replayed")
	}
	switch {
	case len(seen.BlockSizes) == 0:
		if seen.Live+seen.Replayed > 0 {
			r.add("events block size", Skip, "no BlockStored event seen", "")
		}
	case len(seen.BlockSizes) == 1 && seen.BlockSizes[0] == cfg.BlockSize:
		r.add("events block size", OK, fmt.Sprint(cfg.BlockSize), "")
	default:
		r.add("events block size", Fail, fmt.Sprintf("events carry %v, --block-size is %d", seen.BlockSizes, cfg.BlockSize),
			"the worker ignores blocks of another size: set --block-size to the engine's")
	}
}

// subscribe follows the publisher until ctx ends, as the worker's subscriber
// does (dialling, or listening for an endpoint with "*").
func subscribe(ctx context.Context, c kvevents.SubscriberConfig, b *batches) error {
	sock := zmq4.NewSub(ctx, zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(20))
	defer sock.Close()
	var err error
	if strings.Contains(c.Endpoint, "*") {
		err = sock.Listen(strings.Replace(c.Endpoint, "*", "0.0.0.0", 1))
	} else {
		err = sock.Dial(c.Endpoint)
	}
	if err != nil {
		return err
	}
	if err := sock.SetOption(zmq4.OptionSubscribe, c.Topic); err != nil {
		return err
	}
	for {
		msg, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 || len(msg.Frames[2]) == 0 {
			b.mu.Lock()
			b.seen.Bad++
			b.mu.Unlock()
			continue
		}
		b.add(msg.Frames[2], false)
	}
}

// replay asks the replay socket for every batch it holds (from sequence 0) and
// reads until its end marker, as the worker does after a gap.
func replay(ctx context.Context, endpoint string, b *batches) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(100*time.Millisecond))
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		return err
	}
	var start [8]byte
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return err
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			if rctx.Err() != nil {
				return fmt.Errorf("no end marker within 2s: %w", rctx.Err())
			}
			return err
		}
		f := msg.Frames
		for len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) == 3 && len(f[1]) == 8 {
			// (topic, sequence, batch), as the live stream: TensorRT-LLM and
			// llm-d's simulator answer so; vLLM's ZmqEventPublisher sends no topic.
			b.mu.Lock()
			b.seen.ReplayWithTopic++
			b.mu.Unlock()
			f = f[1:]
		}
		if len(f) < 1 || len(f[0]) != 8 {
			return fmt.Errorf("replay answered %d frames, want (sequence, batch)", len(msg.Frames))
		}
		if int64(binary.BigEndian.Uint64(f[0])) < 0 {
			return nil // the end marker
		}
		if len(f) == 2 && len(f[1]) > 0 {
			b.add(f[1], true)
		}
	}
}
