package constrain

import (
	"slices"
	"sync"
	"unsafe"
)

// stackNode is one frame of a parse stack: the grammar position to continue at,
// and the frame below (0: none). Frames are interned, so a stack is one int32.
type stackNode struct{ pos, parent int32 }

// state is a set of parse stacks: what may follow the text read so far.
// Transitions and the token mask are filled in on first use.
type state struct {
	stacks   []int32 // sorted stack ids; 0 is the empty stack (the text may end here)
	next     [256]*state
	mask     []uint64 // bit per token id; nil until computed
	complete bool     // the text read so far is a whole match
	final    bool     // complete, and no byte may follow
}

// dead is the transition of a byte no stack accepts.
var dead = &state{}

// Automaton is a Grammar bound to a Vocabulary: interned states and their
// transitions and masks, shared by every Matcher of the pair. It is safe for
// concurrent use.
type Automaton struct {
	g     *grammar
	vocab *Vocabulary

	mu     sync.Mutex
	nodes  []stackNode
	nodeID map[stackNode]int32
	states map[string]*state
	start  *state
	// scratch for computing one transition: seen[n] == gen marks n expanded in it
	// (a generation, rather than clearing a map that may have grown large).
	seen map[stackNode]uint32
	gen  uint32
	out  []int32
}

// maxStates bounds the interned states of one automaton (each holds 2 KiB of
// transitions, and a mask of a bit per token once drawn from); past it the table
// starts afresh (states already reached stay valid, only sharing is lost), so a
// schema whose states never repeat cannot hold more than a few tens of MiB.
const maxStates = 1 << 14

// maxStackDepth bounds a parse stack; deeper nesting is refused by the automaton.
const maxStackDepth = 4096

// NewAutomaton binds g to vocab.
func NewAutomaton(g *Grammar, vocab *Vocabulary) *Automaton {
	a := &Automaton{g: g.g, vocab: vocab, nodes: []stackNode{{-1, -1}}, nodeID: map[stackNode]int32{},
		states: map[string]*state{}, seen: map[stackNode]uint32{}, gen: 1}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, alt := range a.g.rules[a.g.root] {
		a.expand(alt, 0, 0)
	}
	a.start = a.intern()
	return a
}

// NewMatcher starts a sequence at the beginning of the constrained text.
func (a *Automaton) NewMatcher() *Matcher { return &Matcher{a: a, st: a.start} }

func (a *Automaton) node(pos, parent int32) int32 {
	n := stackNode{pos, parent}
	if id, ok := a.nodeID[n]; ok {
		return id
	}
	id := int32(len(a.nodes))
	a.nodes = append(a.nodes, n)
	a.nodeID[n] = id
	return id
}

// expand adds to a.out the stacks that stack (pos on top of parent) becomes once
// every reference and alternative end on top is resolved, so each stack's top is
// a byte set (or the stack is empty).
func (a *Automaton) expand(pos, parent int32, depth int) {
	if depth > maxStackDepth {
		return
	}
	key := stackNode{pos, parent}
	if a.seen[key] == a.gen {
		return
	}
	a.seen[key] = a.gen
	e := a.g.elems[pos]
	switch e.kind {
	case elemEnd:
		if parent == 0 {
			a.out = append(a.out, 0)
			return
		}
		n := a.nodes[parent]
		a.expand(n.pos, n.parent, depth+1)
	case elemSet:
		a.out = append(a.out, a.node(pos, parent))
	case elemRef:
		ret := parent
		if a.g.elems[pos+1].kind != elemEnd {
			ret = a.node(pos+1, parent) // else a tail call: nothing to come back to
		}
		for _, alt := range a.g.rules[e.ref] {
			a.expand(alt, ret, depth+1)
		}
	}
}

// intern turns a.out into a state, shared with any equal one.
func (a *Automaton) intern() *state {
	slices.Sort(a.out)
	ids := slices.Compact(a.out)
	a.gen++
	a.out = ids[:0]
	if len(ids) == 0 {
		return dead
	}
	key := unsafe.String((*byte)(unsafe.Pointer(&ids[0])), 4*len(ids))
	if s, ok := a.states[key]; ok {
		return s
	}
	if len(a.states) >= maxStates {
		a.states, a.seen = map[string]*state{}, map[stackNode]uint32{}
	}
	s := &state{stacks: slices.Clone(ids), complete: ids[0] == 0}
	s.final = s.complete && len(ids) == 1
	a.states[string([]byte(key))] = s
	return s
}

// step is the state after reading c in s; the caller holds a.mu.
func (a *Automaton) step(s *state, c byte) *state {
	if n := s.next[c]; n != nil {
		return n
	}
	for _, id := range s.stacks {
		if id == 0 {
			continue
		}
		n := a.nodes[id]
		if a.g.sets[a.g.elems[n.pos].ref].has(c) {
			a.expand(n.pos+1, n.parent, 0)
		}
	}
	n := a.intern()
	s.next[c] = n
	return n
}

func (a *Automaton) walk(s *state, b []byte) *state {
	for _, c := range b {
		if s = a.step(s, c); s == dead {
			return dead
		}
	}
	return s
}
