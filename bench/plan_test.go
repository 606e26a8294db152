package bench

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
)

// A plan run again (compare's fresh start for each load of a sweep) says its
// warnings and how it sized the prompts once; what differs from one start to
// the next (here another served model, then a server without /tokenize) is
// said when it first appears.
func TestPlanSaysSizingOnce(t *testing.T) {
	base := testPrompts(t)
	servers := make([]*httptest.Server, 2)
	for i := range servers {
		srv := spmServer{words: map[string]bool{}}
		for _, w := range base.words[:40+i] {
			srv.words[w] = true
		}
		servers[i] = httptest.NewServer(srv)
		defer servers[i].Close()
	}
	bare := httptest.NewServer(spmServer{}) // one-token words: none
	defer bare.Close()
	p := &Plan{
		Client: &Client{Endpoint: EndpointCompletions}, Warnings: []string{"trace blocks are not whole KV blocks"}, base: base,
		NewLoad: func() (Workload, error) { return nil, nil },
	}
	var stderr strings.Builder
	for _, url := range []string{servers[0].URL, servers[0].URL, servers[1].URL, servers[0].URL, bare.URL, bare.URL} {
		p.Client.URL = url
		if _, err := p.RunConfigs(context.Background(), []int{}, "", &strings.Builder{}, &stderr); err != nil {
			t.Fatal(err)
		}
	}
	want := "bench: warning: trace blocks are not whole KV blocks\n" +
		"bench: prompts sized in spm's tokens: 40 one-token words, 2 tokens added to each prompt\n" +
		"bench: prompts sized in spm's tokens: 41 one-token words, 2 tokens added to each prompt\n" +
		"bench: prompts sized in cl100k tokens, not the served model's: model spm holds only 0 of 4000 words as one token; need 16\n"
	if stderr.String() != want {
		t.Errorf("stderr over six starts:\n%s\nwant:\n%s", stderr.String(), want)
	}
}
