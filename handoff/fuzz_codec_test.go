package handoff

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// parseChunk reads the wire format by hand for speed; whatever bytes it is given it
// must not panic, and whenever it accepts them it must agree with the proto library.
func FuzzParseChunk(f *testing.F) {
	for _, c := range []*prefillv1.Chunk{
		{FirstBlock: 3, BlockCount: 2, Data: bytes.Repeat([]byte{7}, 64), Crc32C: 0xdeadbeef},
		{},
		{Data: []byte{1}},
	} {
		b, _ := proto.Marshal(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: c}})
		f.Add(b)
	}
	f.Add([]byte{0x12, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseChunk(b)
		if !ok {
			return
		}
		var want prefillv1.PrefillResponse
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseChunk accepted %x, which proto rejects: %v", b, err)
		}
		if !proto.Equal(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: got}}, &want) {
			t.Fatalf("parseChunk(%x) = %v, proto says %v", b, got, &want)
		}
	})
}
