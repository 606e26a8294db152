// Package modules starts a process's services in the order their dependencies
// declare and stops them in the reverse order, after the module manager of
// grafana/mimir (pkg/mimir/modules.go): each role of tandem is a module, a role's
// command runs that module, and tandem up runs them all.
package modules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Service is a started service: listening when Start returns, serving once Run
// runs, until Run's context ends.
type Service interface {
	Addr() string
	Run(ctx context.Context) error
}

// Module is one role. Start starts its services (one or several) once the
// modules it depends on that run in the same process have started theirs. When it
// fails it returns, with its error, the services it started before the failure.
type Module struct {
	Name  string
	Deps  []string
	Start func(ctx context.Context) ([]Service, error)
}

// Registry holds the modules a process can run.
type Registry struct {
	modules []Module
}

// Register adds m. Its dependencies must be registered before Run.
func (r *Registry) Register(m Module) { r.modules = append(r.modules, m) }

// Names lists the registered modules in registration order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.modules))
	for i, m := range r.modules {
		names[i] = m.Name
	}
	return names
}

func (r *Registry) find(name string) (Module, bool) {
	i := slices.IndexFunc(r.modules, func(m Module) bool { return m.Name == name })
	if i < 0 {
		return Module{}, false
	}
	return r.modules[i], true
}

// Order is targets, each after those of its dependencies that are targets too:
// a dependency that is not a target runs elsewhere (another process, found by its
// address) and is not started here.
func (r *Registry) Order(targets []string) ([]Module, error) {
	var out []Module
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("modules: dependency cycle: %v", append(path, name))
		case 2:
			return nil
		}
		m, ok := r.find(name)
		if !ok {
			return fmt.Errorf("modules: unknown module %q", name)
		}
		state[name] = 1
		for _, d := range m.Deps {
			if _, ok := r.find(d); !ok {
				return fmt.Errorf("modules: %s depends on unknown module %q", name, d)
			}
			if slices.Contains(targets, d) {
				if err := visit(d, append(path, name)); err != nil {
					return err
				}
			}
		}
		state[name] = 2
		out = append(out, m)
		return nil
	}
	for _, t := range targets {
		if err := visit(t, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ready waits until a started and running service serves.
type Ready func(ctx context.Context, s Service) error

// Run starts targets in dependency order: each module's services are started,
// run and, with ready set, waited on before the next module starts. Once all serve it
// calls started, then runs until ctx ends or a service fails, and then stops the
// modules one by one in reverse order, so that nothing is left calling a module
// that has already stopped. It returns the first failure, as the module said it.
func (r *Registry) Run(ctx context.Context, targets []string, ready Ready, started func()) error {
	order, err := r.Order(targets)
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	// Waiting for a module to serve ends early when a service started before it fails.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type running struct {
		stop func()
		wg   sync.WaitGroup
	}
	var up []*running
	stopAll := func(err error) error {
		for _, m := range slices.Backward(up) {
			m.stop()
			m.wg.Wait()
		}
		select {
		case ferr := <-failed:
			return errors.Join(err, ferr)
		default:
			return err
		}
	}
	for _, m := range order {
		svcs, err := m.Start(ctx)
		if err != nil {
			// What it started before failing is stopped like the rest: Run with an
			// ended context shuts a service down at once.
			done, end := context.WithCancel(context.Background())
			end()
			for _, s := range svcs {
				_ = s.Run(done)
			}
			return stopAll(err)
		}
		mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		rm := &running{stop: stop}
		up = append(up, rm)
		for _, s := range svcs {
			rm.wg.Add(1)
			go func() {
				defer rm.wg.Done()
				if err := s.Run(mctx); err != nil {
					select {
					case failed <- err:
					default:
					}
					cancel()
				}
			}()
		}
		for _, s := range svcs {
			if ready == nil {
				break
			}
			if err := ready(rctx, s); err != nil {
				if ctx.Err() == nil && rctx.Err() != nil {
					return stopAll(nil) // a service failed: that is the error
				}
				return stopAll(err)
			}
		}
	}
	if started != nil {
		started()
	}
	<-rctx.Done()
	return stopAll(nil)
}
