package constrain

// A grammar is a set of rules, each a list of alternatives, each a sequence of
// elements: a byte set, a reference to a rule, or the end of the alternative.
// All alternatives live in one flat slice so a position is a single int32, as in
// llama.cpp's GBNF grammars, which this parser follows: a state is a set of
// stacks of positions, advanced one byte at a time.
type elemKind uint8

const (
	elemEnd elemKind = iota
	elemSet
	elemRef
)

type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s[c>>6] |= 1 << (c & 63)
	}
}

func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }

type elem struct {
	kind elemKind
	ref  int32 // elemRef: rule index; elemSet: index into sets
}

type grammar struct {
	elems []elem
	sets  []byteSet
	rules [][]int32 // rule -> start positions of its alternatives
	root  int32
}

// builder assembles a grammar. Rules are declared first (so they may refer to
// each other, recursively) and defined later.
type builder struct {
	alts  [][][]item // rule -> alternatives -> items
	setID map[byteSet]int32
	sets  []byteSet
	// size counts items, to refuse schemas whose grammar would be huge.
	size int
}

// item is an element of an alternative under construction.
type item struct {
	rule int32 // >= 0: a reference
	set  int32 // when rule < 0: a byte set
}

// maxGrammarItems bounds the grammar a schema may compile to (bounded
// repetitions such as maxLength expand into rules).
const maxGrammarItems = 200_000

func newBuilder() *builder { return &builder{setID: map[byteSet]int32{}} }

func (b *builder) declare() int32 {
	b.alts = append(b.alts, nil)
	return int32(len(b.alts) - 1)
}

func (b *builder) define(r int32, alts ...[]item) {
	for _, a := range alts {
		b.size += len(a) + 1
	}
	b.alts[r] = append(b.alts[r], alts...)
}

func (b *builder) rule(alts ...[]item) int32 {
	r := b.declare()
	b.define(r, alts...)
	return r
}

func (b *builder) set(s byteSet) item {
	id, ok := b.setID[s]
	if !ok {
		id = int32(len(b.sets))
		b.sets = append(b.sets, s)
		b.setID[s] = id
	}
	return item{rule: -1, set: id}
}

func (b *builder) ranges(r ...byte) item {
	var s byteSet
	for i := 0; i+1 < len(r); i += 2 {
		s.add(r[i], r[i+1])
	}
	return b.set(s)
}

func (b *builder) ref(r int32) item { return item{rule: r} }

// lit is the items spelling text byte by byte.
func (b *builder) lit(text string) []item {
	out := make([]item, 0, len(text))
	for i := 0; i < len(text); i++ {
		out = append(out, b.ranges(text[i], text[i]))
	}
	return out
}

func seq(parts ...[]item) []item {
	var out []item
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(it item) []item { return []item{it} }

// star is a rule matching zero or more of body (which must not match the empty
// text); it recurses on the right, which the parser runs in constant stack.
func (b *builder) star(body []item) int32 {
	r := b.declare()
	b.define(r, seq(body, one(b.ref(r))), nil)
	return r
}

// repeat is a rule matching between lo and hi copies of body (hi < 0: no bound),
// each copy after the first preceded by sep.
func (b *builder) repeat(body, sep []item, lo, hi int) int32 {
	if hi == 0 {
		return b.rule(nil)
	}
	// more(k): up to k further copies, each with its separator.
	more := func(k int) int32 {
		if k < 0 {
			return b.star(seq(sep, body))
		}
		r := b.rule(nil)
		for i := 0; i < k; i++ {
			r = b.rule(seq(sep, body, one(b.ref(r))), nil)
		}
		return r
	}
	var required []item
	for i := 0; i < lo; i++ {
		if i > 0 {
			required = append(required, sep...)
		}
		required = append(required, body...)
	}
	if lo > 0 {
		rest := -1
		if hi >= 0 {
			rest = hi - lo
		}
		return b.rule(seq(required, one(b.ref(more(rest)))))
	}
	rest := -1
	if hi >= 0 {
		rest = hi - 1
	}
	return b.rule(seq(body, one(b.ref(more(rest)))), nil)
}

func (b *builder) build(root int32) *grammar {
	g := &grammar{sets: b.sets, root: root, rules: make([][]int32, len(b.alts))}
	for r, alts := range b.alts {
		for _, a := range alts {
			g.rules[r] = append(g.rules[r], int32(len(g.elems)))
			for _, it := range a {
				if it.rule >= 0 {
					g.elems = append(g.elems, elem{kind: elemRef, ref: it.rule})
				} else {
					g.elems = append(g.elems, elem{kind: elemSet, ref: it.set})
				}
			}
			g.elems = append(g.elems, elem{kind: elemEnd})
		}
	}
	return g
}
