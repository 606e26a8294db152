package decode

// alwaysLocal is aggregated serving on a decode worker: every prompt prefilled here.
type alwaysLocal struct{}

func (alwaysLocal) Needs() Needs { return Needs{} }

func (alwaysLocal) Decide(situation) choice {
	return choice{reason: "always_local", detail: "policy always-local"}
}

// alwaysRemote is plain disaggregation: every prompt to a prefill worker, whatever its queue.
type alwaysRemote struct{}

func (alwaysRemote) Needs() Needs { return Needs{} }

func (alwaysRemote) Decide(situation) choice {
	return choice{remote: true, reason: "always_remote", detail: "policy always-remote"}
}
