package frontend

import (
	"net/http"
)

// models lists the model served; empty until a worker has published one.
func (f *Frontend) models() modelList {
	list := modelList{Object: "list", Data: []modelJSON{}}
	if m := f.Model(); m != nil {
		list.Data = append(list.Data, f.modelJSON(m))
	}
	return list
}

func (f *Frontend) modelJSON(m *Model) modelJSON {
	return modelJSON{ID: m.ID, Object: "model", Created: f.created, OwnedBy: "tandem", MaxModelLen: m.ContextLength}
}

func (f *Frontend) handleModels(w http.ResponseWriter, _ *http.Request, _ *reqCtx) {
	writeJSON(w, http.StatusOK, f.models())
}

func (f *Frontend) handleModel(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	m, err := f.served(r.PathValue("model"))
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	writeJSON(w, http.StatusOK, f.modelJSON(m))
}

// handleReady answers 200 when a request sent now would be placed, else 503
// with the reason, as the gRPC health service reports it. Not logged as a
// failed request: load balancers and start-up scripts poll it.
func (f *Frontend) handleReady(w http.ResponseWriter, _ *http.Request, _ *reqCtx) {
	if err := f.Ready(); err != nil {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, asAPIError(err).openAI())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
		Model  string `json:"model"`
	}{"ready", f.model.Load().ID})
}

func (f *Frontend) handleHealth(w http.ResponseWriter, _ *http.Request, _ *reqCtx) {
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}
