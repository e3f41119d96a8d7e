package projection

import (
	"encoding/binary"
	"sort"
)

// postings is an ascending list of sequences, kept compact: full blocks
// of postingsBlock sequences stored as their first and last and the
// varint deltas between them (one or two bytes a sequence where a type
// makes up a good part of the log), and the last sequences as they are.
// Not safe for concurrent use.
type postings struct {
	blocks []postingBlock
	tail   []uint64
}

// postingsBlock is how many sequences one block holds.
const postingsBlock = 128

// postingBlock is postingsBlock sequences from first to last.
type postingBlock struct {
	first, last uint64
	deltas      []byte // the varint deltas of the sequences after first
}

// add appends seq, which is above every sequence held.
func (p *postings) add(seq uint64) {
	p.tail = append(p.tail, seq)
	if len(p.tail) < postingsBlock {
		return
	}
	b := postingBlock{first: p.tail[0], last: p.tail[len(p.tail)-1]}
	buf := make([]byte, 0, 2*len(p.tail))
	for i := 1; i < len(p.tail); i++ {
		buf = binary.AppendUvarint(buf, p.tail[i]-p.tail[i-1])
	}
	b.deltas = append([]byte(nil), buf...) // no spare capacity kept
	p.blocks = append(p.blocks, b)
	p.tail = p.tail[:0]
}

// from returns a cursor on the sequences above after.
func (p *postings) from(after uint64) *postingsCursor {
	c := &postingsCursor{p: p}
	c.block = sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].last > after })
	c.load()
	for c.ok() && c.peek() <= after {
		c.next()
	}
	return c
}

// postingsCursor walks a postings list in order: the sequences of one
// block (or of the tail) at a time.
type postingsCursor struct {
	p     *postings
	block int      // the block buf holds; len(p.blocks): the tail
	buf   []uint64 // its sequences
	i     int      // the next in buf
}

// load reads the current block's sequences into buf.
func (c *postingsCursor) load() {
	c.i = 0
	if c.block >= len(c.p.blocks) {
		c.buf = c.p.tail
		return
	}
	// buf is a block's own (a cursor that reached the tail loads no more),
	// so it is reused.
	b := c.p.blocks[c.block]
	c.buf = append(c.buf[:0], b.first)
	seq, rest := b.first, b.deltas
	for len(rest) > 0 {
		d, n := binary.Uvarint(rest)
		seq, rest = seq+d, rest[n:]
		c.buf = append(c.buf, seq)
	}
}

func (c *postingsCursor) ok() bool { return c.i < len(c.buf) }

func (c *postingsCursor) peek() uint64 { return c.buf[c.i] }

// next moves past the current sequence.
func (c *postingsCursor) next() {
	if c.i++; c.i < len(c.buf) || c.block >= len(c.p.blocks) {
		return
	}
	c.block++
	c.load()
}
