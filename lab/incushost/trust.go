package incushost

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
)

// Trust tokens, as IncusOS is joined from another machine: `incus config
// trust add NAME` on a trusted client asks for a token (POST
// /1.0/certificates with token = true: an operation of class "token"
// whose metadata carries the server's addresses, its fingerprint and a
// secret, running until the token is used); `incus remote add NAME
// TOKEN` then presents the secret with its own certificate, untrusted
// yet, and is trusted.

type trustTokens struct {
	mu     sync.Mutex
	byCode map[string]chan []byte // secret -> the certificate (DER) that used it
}

// newToken starts a token operation for the client name.
func (s *Server) newToken(w http.ResponseWriter, name string, req any) {
	secret := newSecret()
	used := make(chan []byte, 1)
	s.tokens.mu.Lock()
	if s.tokens.byCode == nil {
		s.tokens.byCode = map[string]chan []byte{}
	}
	s.tokens.byCode[secret] = used
	s.tokens.mu.Unlock()
	s.mu.Lock()
	addrs := append([]string(nil), s.httpsAddrs...)
	s.mu.Unlock()
	meta := map[string]any{"addresses": addrs, "fingerprint": fingerprint(s.cert.Certificate[0]), "request": req, "secret": secret}
	op := s.ops.startID(newID(), "token", "Executing operation", map[string][]string{}, meta, func(*operation) (map[string]any, error) {
		select {
		case der := <-used:
			return nil, s.trust(der)
		case <-s.closeCtx.Done():
			return nil, errf(http.StatusBadRequest, "The server stopped")
		}
	})
	s.ops.async(w, op)
}

// useToken trusts the certificate of an untrusted client that presents a
// token's secret; false when the secret is no pending token's.
func (s *Server) useToken(token string, der []byte) bool {
	secret := tokenSecret(token)
	s.tokens.mu.Lock()
	used, ok := s.tokens.byCode[secret]
	delete(s.tokens.byCode, secret)
	s.tokens.mu.Unlock()
	if !ok {
		return false
	}
	if err := s.trust(der); err != nil {
		return false
	}
	used <- der
	return true
}

// tokenSecret is the secret of a token as the client sends it: the
// token itself (base64 of JSON with a secret), or the bare secret.
func tokenSecret(token string) string {
	b, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		if b, err = base64.RawURLEncoding.DecodeString(token); err != nil {
			return token
		}
	}
	var t struct {
		Secret string `json:"secret"`
	}
	if json.Unmarshal(b, &t) != nil || t.Secret == "" {
		return token
	}
	return t.Secret
}

// certificateRequest is POST /1.0/certificates.
type certificateRequest struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Certificate string `json:"certificate"`
	Token       bool   `json:"token"`
	TrustToken  string `json:"trust_token"`
	Password    string `json:"password"`
}

func (s *Server) postCertificate(w http.ResponseWriter, r *http.Request) {
	var req certificateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad certificate request: %v", err)
		return
	}
	if !s.isTrusted(r) {
		// Only a token's secret lets an untrusted client in.
		if req.TrustToken == "" || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !s.useToken(req.TrustToken, r.TLS.PeerCertificates[0].Raw) {
			fail(w, http.StatusForbidden, "not authorized")
			return
		}
		syncOK(w, map[string]any{})
		return
	}
	if req.Token {
		s.newToken(w, req.Name, req)
		return
	}
	der, err := decodeCert(req.Certificate)
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := s.trust(der); err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	syncOK(w, map[string]any{})
}
