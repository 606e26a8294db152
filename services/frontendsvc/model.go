package frontendsvc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/chattemplate"
	"github.com/tandem-serve/tandem/frontend"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/modelcard"
	"github.com/tandem-serve/tandem/services/rpc"
)

// modelFromCard builds what the frontend serves from a worker's model card. A chat
// template tandem cannot compile is not fatal: completions still work and chats get
// the fallback transcript; warn says so.
func modelFromCard(card *workerv1.ModelCard) (m *frontend.Model, warn, err error) {
	m = &frontend.Model{ID: card.GetModel(), Fingerprint: card.GetFingerprint(), ContextLength: int(card.GetContextLength())}
	if m.Tokenizer, err = modelcard.Tokenizer(card); err != nil {
		return nil, nil, err
	}
	if _, builtin := card.GetTokenizer().(*workerv1.ModelCard_TokenizerName); builtin {
		// The random-weight models have no template of their own.
		m.Template = frontend.ChatML{}
		return m, nil, nil
	}
	tmpl := chattemplate.Fallback()
	if src := card.GetChatTemplate(); src != "" {
		opts := chattemplate.Options{}
		if bos, ok := m.Tokenizer.BOS(); ok {
			opts.BOSToken = m.Tokenizer.Piece(bos)
		}
		opts.EOSToken = m.Tokenizer.Piece(m.Tokenizer.EOS())
		if compiled, cerr := chattemplate.New(src, opts); cerr != nil {
			warn = fmt.Errorf("the model's chat template: %w; chats use the fallback transcript", cerr)
		} else {
			tmpl = compiled
		}
	}
	m.Template = frontend.Jinja{T: tmpl}
	return m, warn, nil
}

// readiness carries the frontend's own readiness (frontend.Ready: a model loaded
// and the router serving) to the gRPC health service, so that health and
// /readyz never disagree: a load balancer must not send requests this frontend
// would refuse. update is called after either changes.
type readiness struct {
	mu         sync.Mutex // orders the updates of the router watch and the model loader
	fe         *frontend.Frontend
	setServing func(bool)
}

func (r *readiness) update() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setServing(r.fe.Ready() == nil)
}

// modelLoader learns the served model from the workers. Until the frontend has one,
// it asks the router for the workers and takes the first model card it can read.
// Afterwards it tells, once each, of workers serving other weights: the router
// never sends them this frontend's requests, and an operator should know why.
type modelLoader struct {
	router  routerv1.RouterServiceClient
	conns   *rpc.Conns
	fe      *frontend.Frontend
	backend *frontend.Routed
	ready   *readiness
	log     *slog.Logger
	// told lists the workers already reported as serving other weights.
	told map[string]bool
}

func (l *modelLoader) run(ctx context.Context) {
	for {
		l.poll(ctx)
		wait := time.Second
		if l.fe.Model() != nil {
			wait = 10 * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (l *modelLoader) poll(ctx context.Context) {
	resp, err := l.router.ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		l.log.Debug("listing workers for the model card", "err", err)
		return
	}
	for _, w := range resp.GetWorkers() {
		if cur := l.fe.Model(); cur != nil {
			if fp := w.GetModelFingerprint(); fp != "" && fp != cur.Fingerprint && !l.told[w.GetId()] {
				l.told[w.GetId()] = true
				l.log.Error("worker serves other weights than this frontend's model; it gets none of its requests",
					"worker_id", w.GetId(), "address", w.GetAddress(), "worker_fingerprint", fp,
					"model", cur.ID, "fingerprint", cur.Fingerprint)
			}
			continue
		}
		if err := l.load(ctx, w); err != nil {
			l.log.Error("cannot serve the model a worker publishes", "worker_id", w.GetId(), "err", err)
		}
	}
}

func (l *modelLoader) load(ctx context.Context, w *routerv1.Worker) error {
	cc, err := l.conns.Get(w.GetAddress())
	if err != nil {
		return err
	}
	card, err := modelcard.Fetch(ctx, cc)
	if err != nil {
		return err
	}
	m, warn, err := modelFromCard(card)
	if err != nil {
		return err
	}
	if warn != nil {
		l.log.Error("serving the model without its chat template", "worker_id", w.GetId(), "err", warn)
	}
	l.backend.SetModel(card.GetFingerprint(), int(card.GetBlockSize()))
	if err := l.fe.SetModel(m); err != nil {
		return err
	}
	l.ready.update()
	l.log.Info("serving the model a worker publishes", "worker_id", w.GetId(), "model", m.ID, "fingerprint", m.Fingerprint,
		"context_length", m.ContextLength, "tokenizer", m.Tokenizer.Name(), "chat_template", m.Template.Name())
	return nil
}
