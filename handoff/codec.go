package handoff

import (
	"hash/crc32"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// castagnoli is the CRC32C table every chunk is checked with, on both sides.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is a chunk's CRC32C.
func checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

// chunkCodec is the gRPC codec of one receiving stream. The default codec gathers
// each message's HTTP/2 frames into one buffer and then copies the bytes field out
// of it into a fresh allocation: two copies and a megabyte of garbage per chunk.
// This one gathers the frames into a buffer the stream owns and reuses, and decodes
// a chunk's data as a slice of it. A chunk is therefore valid only until the next
// Recv; Receive checks and imports each chunk before asking for the next. Any
// message that is not a plain chunk (header, trailer, or a chunk with fields this
// worker does not know) is decoded by the standard proto codec, which copies what
// it keeps.
type chunkCodec struct {
	buf []byte
}

var protoCodec = encoding.GetCodecV2("proto")

// Name keeps the content type application/grpc+proto: the wire format is proto.
func (*chunkCodec) Name() string { return "proto" }

func (*chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (c *chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*prefillv1.PrefillResponse)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	n := data.Len()
	if cap(c.buf) < n {
		// Headroom: a chunk's varints grow as the stream goes on.
		c.buf = make([]byte, n, n+n/8)
	}
	b := c.buf[:n]
	data.CopyTo(b)
	if chunk, ok := parseChunk(b); ok {
		m.Reset()
		m.Msg = &prefillv1.PrefillResponse_Chunk{Chunk: chunk}
		return nil
	}
	return proto.Unmarshal(b, m)
}

// parseChunk decodes b as a PrefillResponse holding exactly one chunk made only of
// Chunk's known fields, with its data aliasing b. Anything else reports false.
func parseChunk(b []byte) (*prefillv1.Chunk, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	c := &prefillv1.Chunk{}
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return nil, false
		}
		body = body[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(body)
			if n < 0 {
				return nil, false
			}
			if num == 1 {
				c.FirstBlock = uint32(x)
			} else {
				c.BlockCount = uint32(x)
			}
			body = body[n:]
		case num == 3 && typ == protowire.BytesType:
			d, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return nil, false
			}
			c.Data = d[:len(d):len(d)]
			body = body[n:]
		case num == 4 && typ == protowire.Fixed32Type:
			x, n := protowire.ConsumeFixed32(body)
			if n < 0 {
				return nil, false
			}
			c.Crc32C = x
			body = body[n:]
		default:
			return nil, false
		}
	}
	return c, true
}
