package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// Workload produces the requests of a run.
type Workload interface {
	// Name describes the workload for the report.
	Name() string
	// Next returns the next request to send. The runner calls it from one
	// goroutine at a time, with its own random source.
	Next(rng *rand.Rand) (Request, error)
	// Done is told how a request went; it may be called concurrently.
	Done(req Request, res *Result)
}

// ReportNoter is a workload with something of its own to put in the report (a
// trace replay: the reuse its window offers, the requests cut to fit).
type ReportNoter interface {
	NoteReport(*Report)
}

// ClassOrderer is a workload whose request classes have an order of their own,
// which the report keeps.
type ClassOrderer interface {
	ClassOrder() []string
}

// Class is one kind of request in a mixed workload: a share of the traffic with
// its own prompt and output lengths in tokens.
type Class struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
	ISL    int     `json:"isl"`
	OSL    int     `json:"osl"`
}

// ParseMix parses "0.8:64/32,0.2:2048/64": comma-separated weight:ISL/OSL, each
// optionally named as name=weight:ISL/OSL. An unnamed class is named ISL/OSL.
func ParseMix(s string) ([]Class, error) {
	var classes []Class
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var c Class
		if name, rest, ok := strings.Cut(part, "="); ok {
			c.Name, part = strings.TrimSpace(name), rest
		}
		w, lens, ok := strings.Cut(part, ":")
		isl, osl, ok2 := strings.Cut(lens, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("bench: mix class %q: want weight:ISL/OSL, e.g. 0.8:64/32", part)
		}
		var err error
		if c.Weight, err = strconv.ParseFloat(strings.TrimSpace(w), 64); err != nil || !(c.Weight > 0) {
			return nil, fmt.Errorf("bench: mix class %q: weight must be a positive number", part)
		}
		if c.ISL, err = strconv.Atoi(strings.TrimSpace(isl)); err != nil || c.ISL < 1 {
			return nil, fmt.Errorf("bench: mix class %q: ISL must be a positive integer", part)
		}
		if c.OSL, err = strconv.Atoi(strings.TrimSpace(osl)); err != nil || c.OSL < 1 {
			return nil, fmt.Errorf("bench: mix class %q: OSL must be a positive integer", part)
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("%d/%d", c.ISL, c.OSL)
		}
		for _, o := range classes {
			if o.Name == c.Name {
				return nil, fmt.Errorf("bench: mix class %q appears twice; name them (short=0.8:64/32)", c.Name)
			}
		}
		classes = append(classes, c)
	}
	if len(classes) == 0 {
		return nil, errors.New("bench: the mix has no classes")
	}
	return classes, nil
}

// Mixed draws each request's class at random by weight, and builds a fresh random
// prompt of exactly the class's ISL tokens.
type Mixed struct {
	p       *Prompts
	classes []Class
	total   float64
	// IgnoreEOS asks for exactly each class's OSL (ignore_eos): a model, or the
	// sim's random tokens, may otherwise end an answer early at an EOS.
	IgnoreEOS bool
}

// NewMixed returns a mixed workload over classes.
func NewMixed(p *Prompts, classes []Class) (*Mixed, error) {
	if len(classes) == 0 {
		return nil, errors.New("bench: a mixed workload needs a class")
	}
	m := &Mixed{p: p, classes: classes}
	for _, c := range classes {
		if !(c.Weight > 0) || c.ISL < 1 || c.OSL < 1 {
			return nil, fmt.Errorf("bench: class %q needs a positive weight, ISL and OSL", c.Name)
		}
		m.total += c.Weight
	}
	return m, nil
}

// NewFixed returns a workload whose every request has isl prompt tokens and asks
// for osl output tokens.
func NewFixed(p *Prompts, isl, osl int) (*Mixed, error) {
	return NewMixed(p, []Class{{Name: fmt.Sprintf("%d/%d", isl, osl), Weight: 1, ISL: isl, OSL: osl}})
}

// Name implements Workload.
func (m *Mixed) Name() string {
	if len(m.classes) == 1 {
		c := m.classes[0]
		return fmt.Sprintf("fixed %d/%d", c.ISL, c.OSL)
	}
	parts := make([]string, len(m.classes))
	for i, c := range m.classes {
		parts[i] = fmt.Sprintf("%.3g:%d/%d", c.Weight/m.total, c.ISL, c.OSL)
		if c.Name != fmt.Sprintf("%d/%d", c.ISL, c.OSL) {
			parts[i] = c.Name + "=" + parts[i]
		}
	}
	return "mixed " + strings.Join(parts, ",")
}

// Longest returns the longest request, prompt and output tokens, and what it
// is, for the context check.
func (m *Mixed) Longest() (int, string) {
	best := m.classes[0]
	for _, c := range m.classes {
		if c.ISL+c.OSL > best.ISL+best.OSL {
			best = c
		}
	}
	return best.ISL + best.OSL, fmt.Sprintf("class %s: %d prompt and %d output tokens; lower --isl/--osl or the --mix", best.Name, best.ISL, best.OSL)
}

// Classes returns the workload's classes.
func (m *Mixed) Classes() []Class { return m.classes }

// ClassOrder implements ClassOrderer: the classes as the mix gave them.
func (m *Mixed) ClassOrder() []string {
	names := make([]string, len(m.classes))
	for i, c := range m.classes {
		names[i] = c.Name
	}
	return names
}

// Next implements Workload.
func (m *Mixed) Next(rng *rand.Rand) (Request, error) {
	c := m.classes[len(m.classes)-1]
	x := rng.Float64() * m.total
	for _, cc := range m.classes {
		if x < cc.Weight {
			c = cc
			break
		}
		x -= cc.Weight
	}
	prompt, err := m.p.Make(rng, c.ISL)
	if err != nil {
		return Request{}, err
	}
	r := Request{Class: c.Name, Prompt: prompt, MaxTokens: c.OSL, PromptTokens: c.ISL, IgnoreEOS: m.IgnoreEOS}
	if m.IgnoreEOS {
		r.WantTokens = c.OSL
	}
	return r, nil
}

// Done implements Workload.
func (*Mixed) Done(Request, *Result) {}

// SharedPrefixConfig shapes a shared-prefix multi-turn workload.
type SharedPrefixConfig struct {
	// PrefixTokens is the length of the system prompt every conversation shares.
	PrefixTokens int
	// TurnTokens is the length of each new user message.
	TurnTokens int
	// OutputTokens is each answer's budget.
	OutputTokens int
	// Turns is how many turns a conversation has before a new one replaces it.
	Turns int
	// Conversations is how many conversations run side by side (more are opened
	// when every one is waiting for an answer).
	Conversations int
}

// SharedPrefix is a multi-turn chat workload: every conversation starts with the
// same system prompt, and each turn resends the whole history (the previous
// questions and the answers the server gave) plus a new question, so a server with
// prefix caching needs to prefill only the new part. Requests are classed by turn:
// turn-1 shares only the system prompt, turn-2 and later also their own history.
type SharedPrefix struct {
	p   *Prompts
	cfg SharedPrefixConfig

	mu     sync.Mutex
	system string
	convs  []*conversation
	next   int
}

type conversation struct {
	history []Message // everything answered so far, after the system prompt
	turn    int       // turns answered
	busy    bool
}

// NewSharedPrefix returns a shared-prefix multi-turn workload.
func NewSharedPrefix(p *Prompts, cfg SharedPrefixConfig) (*SharedPrefix, error) {
	if cfg.PrefixTokens < 1 || cfg.TurnTokens < 1 || cfg.OutputTokens < 1 || cfg.Turns < 1 || cfg.Conversations < 1 {
		return nil, fmt.Errorf("bench: shared-prefix workload needs positive prefix, turn and output tokens, turns and conversations; got %+v", cfg)
	}
	return &SharedPrefix{p: p, cfg: cfg}, nil
}

// Name implements Workload.
func (s *SharedPrefix) Name() string {
	c := s.cfg
	return fmt.Sprintf("shared-prefix prefix=%d turn=%d/%d turns=%d conversations=%d",
		c.PrefixTokens, c.TurnTokens, c.OutputTokens, c.Turns, c.Conversations)
}

// Longest returns the last turn of a conversation, prompt and answer, and what
// it is made of, for the context check. The separators between turns (or the
// chat template's markers) add a few tokens each.
func (s *SharedPrefix) Longest() (int, string) {
	c := s.cfg
	n := c.PrefixTokens + c.Turns*c.TurnTokens + c.Turns*c.OutputTokens
	return n, fmt.Sprintf("a %d-token system prompt, %d turns of %d tokens and their %d-token answers; lower --prefix-len, --isl, --osl or --turns",
		c.PrefixTokens, c.Turns, c.TurnTokens, c.OutputTokens)
}

// Next implements Workload.
func (s *SharedPrefix) Next(rng *rand.Rand) (Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.system == "" {
		sys, err := s.p.Make(rng, s.cfg.PrefixTokens)
		if err != nil {
			return Request{}, err
		}
		s.system = sys
		for range s.cfg.Conversations {
			s.convs = append(s.convs, &conversation{})
		}
	}
	var conv *conversation
	for i := range s.convs {
		c := s.convs[(s.next+i)%len(s.convs)]
		if !c.busy {
			conv = c
			s.next = (s.next + i + 1) % len(s.convs)
			break
		}
	}
	if conv == nil {
		conv = &conversation{}
		s.convs = append(s.convs, conv)
	}
	question, err := s.p.Make(rng, s.cfg.TurnTokens)
	if err != nil {
		return Request{}, err
	}
	conv.busy = true
	msgs := make([]Message, 0, len(conv.history)+2)
	msgs = append(msgs, Message{Role: "system", Content: s.system})
	msgs = append(msgs, conv.history...)
	msgs = append(msgs, Message{Role: "user", Content: question})
	return Request{
		Class:        fmt.Sprintf("turn-%d", conv.turn+1),
		Messages:     msgs,
		MaxTokens:    s.cfg.OutputTokens,
		PromptTokens: s.p.Count(flatten(msgs)),
		conv:         conv,
	}, nil
}

// Done implements Workload: a conversation moves on after an answer, and starts
// again after its last turn or a failure.
func (s *SharedPrefix) Done(req Request, res *Result) {
	c := req.conv
	if c == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.busy = false
	if !res.OK() || c.turn+1 >= s.cfg.Turns {
		c.history, c.turn = nil, 0
		return
	}
	c.history = append(c.history, req.Messages[len(req.Messages)-1], Message{Role: "assistant", Content: res.text})
	c.turn++
}

// JSONL replays requests from a file, one JSON object a line:
// {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}, with
// "max_tokens" and an optional "class". It cycles when it reaches the end.
type JSONL struct {
	reqs []Request
	next int
}

type jsonlLine struct {
	Prompt    *string   `json:"prompt"`
	Messages  []Message `json:"messages"`
	MaxTokens int       `json:"max_tokens"`
	Class     string    `json:"class"`
}

// ReadJSONL reads a JSONL workload. Unknown fields are rejected so a misspelt
// max_tokens is an error, not a silent default. p, if not nil, counts prompt tokens.
func ReadJSONL(r io.Reader, p *Prompts) (*JSONL, error) {
	j := &JSONL{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l jsonlLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("bench: jsonl line %d: %w", n, err)
		}
		switch {
		case (l.Prompt == nil) == (len(l.Messages) == 0):
			return nil, fmt.Errorf("bench: jsonl line %d: give exactly one of prompt and messages", n)
		case l.MaxTokens < 1:
			return nil, fmt.Errorf("bench: jsonl line %d: max_tokens must be a positive integer", n)
		}
		req := Request{Class: l.Class, Messages: l.Messages, MaxTokens: l.MaxTokens}
		if req.Class == "" {
			req.Class = "jsonl"
		}
		if l.Prompt != nil {
			req.Prompt = *l.Prompt
		}
		if p != nil {
			if req.Prompt != "" {
				req.PromptTokens = p.Count(req.Prompt)
			} else {
				req.PromptTokens = p.Count(flatten(req.Messages))
			}
		}
		j.reqs = append(j.reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: jsonl: %w", err)
	}
	if len(j.reqs) == 0 {
		return nil, errors.New("bench: the jsonl file holds no requests")
	}
	return j, nil
}

// Name implements Workload.
func (j *JSONL) Name() string { return fmt.Sprintf("jsonl (%d requests)", len(j.reqs)) }

// Len is the number of requests in the file.
func (j *JSONL) Len() int { return len(j.reqs) }

// Next implements Workload.
func (j *JSONL) Next(*rand.Rand) (Request, error) {
	r := j.reqs[j.next]
	j.next = (j.next + 1) % len(j.reqs)
	return r, nil
}

// Done implements Workload.
func (*JSONL) Done(Request, *Result) {}
