package coordinator

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// loadTLS returns the server's TLS configuration from cfg, or nil when it
// serves plain HTTP. The certificate is read now, so that a bad one stops
// the start with its name, and again whenever its files change (see
// certReloader).
func loadTLS(cfg Config, log logrus.FieldLogger) (*tls.Config, error) {
	switch {
	case cfg.TLSCert == "" && cfg.TLSKey == "":
		return nil, nil
	case cfg.TLSCert == "" || cfg.TLSKey == "":
		return nil, fmt.Errorf("tls_cert and tls_key go together; give both (the certificate and its key) or neither")
	}
	r := &certReloader{certFile: cfg.TLSCert, keyFile: cfg.TLSKey, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{GetCertificate: r.get, MinVersion: tls.VersionTLS12}, nil
}

// certReloader serves the certificate its files hold now. Site certificates
// are renewed in place (certbot, cert-manager, an Ansible run every 60 or 90
// days) while the coordinator runs for months; one read at start served the
// old certificate until it expired and every agent then refused the
// coordinator at once. A handshake looks at the files' identity (inode,
// size, mtime) at most once per certCheckEvery, and a renewal that does not
// load (a key that does not match, a half-written file) keeps the
// certificate that works and says so in the log, once per change.
type certReloader struct {
	certFile, keyFile string
	log               logrus.FieldLogger

	mu      sync.Mutex
	cert    *tls.Certificate
	seen    string // identity of the files last looked at
	checked time.Time
}

// certCheckEvery bounds how often a handshake stats the files.
const certCheckEvery = time.Second

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		if id := r.identity(); id != r.seen {
			if err := r.loadLocked(id); err != nil {
				r.seen = id
				r.log.WithError(err).Error("the TLS certificate's files changed but do not load; still serving the certificate read before")
			}
		}
	}
	return r.cert, nil
}

func (r *certReloader) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	return r.loadLocked(r.identity())
}

func (r *certReloader) loadLocked(id string) error {
	if err := api.CheckPrivate("tls_key", r.keyFile); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls_cert %s, tls_key %s: %w", r.certFile, r.keyFile, err)
	}
	if r.cert != nil {
		r.log.WithField("tls_cert", r.certFile).Info("serving the renewed TLS certificate")
	}
	r.cert, r.seen = &cert, id
	return nil
}

// identity names the files' current contents cheaply: a renewal replaces
// the file (new inode) or rewrites it (new mtime or size).
func (r *certReloader) identity() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			b.WriteString("missing;")
			continue
		}
		ino := uint64(0)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%d/%d/%d;", ino, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
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
