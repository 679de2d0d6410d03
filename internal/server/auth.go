package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// Owner sets the token of the agent's own reporter, the one caller that may
// change what the node keeps through the server: every state-changing
// endpoint (see change) takes a request only from a loopback peer that sends
// it as "Authorization: Bearer <token>". Until Owner is called no such
// request is taken. Call it before Run.
func (s *Server) Owner(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owner, s.owned = sha256.Sum256([]byte(token)), token != ""
}

// change serves pattern with h, an endpoint that changes what the node keeps
// (PUT /required, PUT /sets). Every such endpoint is registered here and nowhere
// else, so that each goes through the same rule, refuse: the loopback peer
// and the owner's token.
func (s *Server) change(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if code, why := s.refuse(r); code != 0 {
			noCache(w)
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			}
			http.Error(w, why, code)
			return
		}
		h(w, r)
	})
}

// refuse says why r may not change what the node keeps (a status code and
// the cause), or 0. A peer that is not loopback is 403 whatever it sends:
// the agent may listen on the pod network or, with hostNetwork, on every
// address of the node. A loopback peer without the owner's token is 401:
// any local user reaches loopback. The tokens are compared by their SHA-256
// in constant time, so the answer's timing says nothing of the token.
func (s *Server) refuse(r *http.Request) (int, string) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return http.StatusForbidden, r.Method + " " + r.URL.Path + " is taken from loopback only (the node's reporter)"
	}
	s.mu.Lock()
	want, owned := s.owner, s.owned
	s.mu.Unlock()
	if !owned {
		return http.StatusUnauthorized, "the agent has no token for its reporter: it takes no " + r.Method + " " + r.URL.Path
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	got := sha256.Sum256([]byte(token))
	if match := subtle.ConstantTimeCompare(got[:], want[:]); !ok || match != 1 {
		return http.StatusUnauthorized, r.Method + " " + r.URL.Path + " needs the token of the node's reporter (Authorization: Bearer, from the agent's --token-file)"
	}
	return 0, ""
}
