package constrain

import (
	"container/list"
	"sync"
)

// Cache keeps compiled constraints, least recently used first out. With a
// Vocabulary it keeps Automata (a Grammar bound to that vocabulary, with the
// transitions and masks learnt so far); without, Grammars only. Safe for
// concurrent use.
type Cache struct {
	vocab *Vocabulary
	size  int

	mu    sync.Mutex
	order *list.List // of *cacheEntry, most recent first
	byKey map[Spec]*list.Element
}

type cacheEntry struct {
	spec Spec
	g    *Grammar
	a    *Automaton
	err  error
}

// NewCache keeps up to size constraints compiled for vocab (nil: grammars only).
func NewCache(vocab *Vocabulary, size int) *Cache {
	return &Cache{vocab: vocab, size: max(size, 1), order: list.New(), byKey: map[Spec]*list.Element{}}
}

// Grammar compiles spec, or returns it compiled before (an error too is kept).
func (c *Cache) Grammar(spec Spec) (*Grammar, error) {
	e := c.get(spec, false)
	return e.g, e.err
}

// Automaton returns spec compiled for the cache's vocabulary.
func (c *Cache) Automaton(spec Spec) (*Automaton, error) {
	e := c.get(spec, true)
	return e.a, e.err
}

func (c *Cache) get(spec Spec, bind bool) *cacheEntry {
	c.mu.Lock()
	if el, ok := c.byKey[spec]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		if e.err != nil || !bind || e.a != nil {
			c.mu.Unlock()
			return e
		}
	}
	c.mu.Unlock()
	// Compiled outside the lock: a large schema must not stall other requests.
	e := &cacheEntry{spec: spec}
	e.g, e.err = Compile(spec)
	if e.err == nil && bind && c.vocab != nil {
		e.a = NewAutomaton(e.g, c.vocab)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[spec]; ok && (el.Value.(*cacheEntry).a != nil || !bind) {
		return el.Value.(*cacheEntry) // another caller won the race: share its states
	} else if ok {
		c.order.Remove(el)
	}
	c.byKey[spec] = c.order.PushFront(e)
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).spec)
	}
	return e
}
