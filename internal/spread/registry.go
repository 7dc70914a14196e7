package spread

import "sync"

// Registry holds one Endpoint per address, shared by every group that lists the address (its
// calls in flight and its latency are the endpoint's, whichever group sent them). Safe for
// concurrent use; it is read when a tier view changes, not on a pick.
type Registry struct {
	opts EndpointOptions
	mu   sync.Mutex
	eps  map[string]*Endpoint
}

// NewRegistry returns an empty Registry whose Endpoints are created with opts.
func NewRegistry(opts EndpointOptions) *Registry {
	return &Registry{opts: opts, eps: map[string]*Endpoint{}}
}

// Endpoint returns address's Endpoint, creating it (with no score) on first use.
func (r *Registry) Endpoint(address string) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.eps[address]
	if !ok {
		e = NewEndpoint(address, r.opts)
		r.eps[address] = e
	}
	return e
}

// Retain forgets every address not in keep (an endpoint no group lists any more); a Picker
// still holding a forgotten Endpoint keeps using it until its view changes.
func (r *Registry) Retain(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a := range r.eps {
		if !keep[a] {
			delete(r.eps, a)
		}
	}
}
