package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"time"
)

//go:embed static
var static embed.FS

// contentSecurity keeps the page to its own scripts, styles and endpoints: no
// inline script, nothing fetched from elsewhere, no framing.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console beside api (the OpenAI API and whatever else the
// frontend serves): the page at /, its files under /console/, the events at
// /console/events and the policy form's endpoint at /console/policy. Every
// other request goes to api.
func (c *Console) Handler(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { serveStatic(w, r, "index.html") })
	mux.HandleFunc("GET /console/{file}", func(w http.ResponseWriter, r *http.Request) { serveStatic(w, r, r.PathValue("file")) })
	mux.Handle("GET /console/events", c.opts.Guard(http.HandlerFunc(c.serveEvents)))
	// The policy changes what every request does: no other site may post it
	// from a browser that has the page open.
	mux.Handle("POST /console/policy", http.NewCrossOriginProtection().Handler(c.opts.Guard(http.HandlerFunc(c.servePolicy))))
	return mux
}

// serveStatic serves one embedded file. They change only with the binary; a
// reload after an upgrade must not mix old and new, so caches revalidate.
func serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	b, err := fs.ReadFile(static, path.Join("static", path.Clean("/"+name)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if name == "index.html" {
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Frame-Options", "DENY")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// serveEvents streams the console's events to one client until it goes away or
// the console closes.
func (c *Console) serveEvents(w http.ResponseWriter, r *http.Request) {
	sub, first, err := c.subscribe()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer c.unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // keep proxies from holding events back
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for _, b := range first {
		if !send(b) {
			return
		}
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case b, ok := <-sub.ch:
			if !ok || !send(b) {
				return
			}
		}
	}
}
