package coordinator

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/llmgw/llmgw/api"
)

// loadTLS returns the server's TLS configuration from cfg, or nil when it
// serves plain HTTP.
func loadTLS(cfg Config) (*tls.Config, error) {
	switch {
	case cfg.TLSCert == "" && cfg.TLSKey == "":
		return nil, nil
	case cfg.TLSCert == "" || cfg.TLSKey == "":
		return nil, fmt.Errorf("tls_cert and tls_key go together; give both (the certificate and its key) or neither")
	}
	if err := api.CheckPrivate("tls_key", cfg.TLSKey); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls_cert %s, tls_key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// checkPlainHTTP refuses to serve plain HTTP beyond loopback unless the
// configuration says insecure_http = true: on a management network many
// people reach, an agent's token and the catalog's answer cross it in the
// clear, and a rewritten catalog is code run in users' jobs.
func (s *Server) checkPlainHTTP(addr net.Addr) error {
	if s.tls != nil || s.cfg.InsecureHTTP {
		return nil
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return nil
	}
	return fmt.Errorf("listen %s: serving plain HTTP beyond loopback lets anyone on the network read the tokens and rewrite the catalog; set tls_cert and tls_key (and give agents and clients tls_ca), or, on a network only you can reach, insecure_http = true", addr)
}
