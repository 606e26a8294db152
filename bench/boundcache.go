package bench

import "container/list"

// boundCache is the prefix cache a bound credits, in the trace's blocks.
type boundCache struct {
	mode string
	// seen holds every block of the window so far (unbounded).
	seen map[int64]bool
	// devs are the devices' LRUs and work the prompt tokens each prefilled
	// (pool).
	devs []*blockLRU
	work []int
}

func newBoundCache(cfg BoundConfig) *boundCache {
	c := &boundCache{mode: cfg.Cache, seen: map[int64]bool{}}
	if cfg.Cache == CachePool {
		// The pool in trace blocks: what one device's KV would hold if it held
		// nothing but finished prompts (it also holds the running sequences').
		capacity := max(1, cfg.Config.NumBlocks*cfg.Config.BlockSize/cfg.BlockSize)
		for range cfg.Devices {
			c.devs = append(c.devs, newBlockLRU(capacity))
		}
		c.work = make([]int, cfg.Devices)
	}
	return c
}

// credit returns how many of r's prompt tokens the cache holds, and records r's
// blocks. A prefix cache matches leading blocks only (each block's hash covers
// its parent), and, as the sim does, whole KV blocks short of the prompt's last
// token, which is always computed.
func (c *boundCache) credit(r TraceRequest, cfg BoundConfig) int {
	lead := 0
	switch c.mode {
	case CacheUnbounded:
		for lead < len(r.HashIDs) && c.seen[r.HashIDs[lead]] {
			lead++
		}
		for _, h := range r.HashIDs {
			c.seen[h] = true
		}
	case CachePool:
		// The device holding the longest prefix, as a cache-aware router picks;
		// between equals, the one that has prefilled least.
		best := 0
		for i, d := range c.devs {
			n := d.lead(r.HashIDs)
			if n > lead || (n == lead && c.work[i] < c.work[best]) {
				best, lead = i, n
			}
		}
		c.devs[best].touch(r.HashIDs)
		defer func() { c.work[best] += r.InputLength - min(lead*cfg.BlockSize, r.InputLength) }()
	}
	kv := cfg.Config.BlockSize
	return min(lead*cfg.BlockSize/kv, (r.InputLength-1)/kv) * kv
}

// blockLRU is a least-recently-used set of block ids.
type blockLRU struct {
	capacity int
	order    *list.List // front: most recent
	at       map[int64]*list.Element
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: capacity, order: list.New(), at: map[int64]*list.Element{}}
}

// lead counts the leading ids held.
func (l *blockLRU) lead(ids []int64) int {
	n := 0
	for n < len(ids) && l.at[ids[n]] != nil {
		n++
	}
	return n
}

// touch makes ids the most recent, the first of them most of all (a prefix's
// root outlives its leaves), and evicts the least recent beyond capacity.
func (l *blockLRU) touch(ids []int64) {
	for i := len(ids) - 1; i >= 0; i-- {
		if e := l.at[ids[i]]; e != nil {
			l.order.MoveToFront(e)
		} else {
			l.at[ids[i]] = l.order.PushFront(ids[i])
		}
	}
	for l.order.Len() > l.capacity {
		e := l.order.Back()
		delete(l.at, e.Value.(int64))
		l.order.Remove(e)
	}
}
