package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TLSCAEnv names the environment variable a client reads for the CA that
// signed the coordinator's certificate when none is given otherwise
// (Client.TLSCA, --tls-ca, the agent's tls_ca).
const TLSCAEnv = "LLMGW_TLS_CA"

// LoadCA reads a PEM file of one or more CA certificates into a pool.
func LoadCA(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls_ca %s holds no PEM certificate; give the CA that signed the coordinator's tls_cert", file)
	}
	return pool, nil
}

// TLSTransport is an HTTP transport that trusts only the CAs in caFile:
// the coordinator's answers decide what root fetches and what jobs load, so
// a client configured with a CA trusts nothing else, not the system's
// roots, which any public certificate chains to.
func TLSTransport(caFile string) (*http.Transport, error) {
	pool, err := LoadCA(caFile)
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// tlsClients caches one client per CA file, so a command making several
// requests reads and parses the file once.
var tlsClients sync.Map // CA file → *http.Client

// httpClient is the client Do uses: c.HTTP when set; else, with a CA
// (c.TLSCA, else $LLMGW_TLS_CA), one that trusts only it and refuses a
// plain http:// coordinator, whose answers anyone on the path could rewrite.
func (c *Client) httpClient() (*http.Client, error) {
	if c.HTTP != nil {
		return c.HTTP, nil
	}
	ca := c.TLSCA
	if ca == "" {
		ca = os.Getenv(TLSCAEnv)
	}
	if ca == "" {
		return defaultHTTP, nil
	}
	if !strings.HasPrefix(c.BaseURL, "https://") {
		return nil, fmt.Errorf("coordinator %s: a TLS CA is configured (%s), but the URL is not https://; an answer over plain HTTP could be rewritten on the way, so give the coordinator's https:// URL", c.BaseURL, ca)
	}
	if hc, ok := tlsClients.Load(ca); ok {
		return hc.(*http.Client), nil
	}
	t, err := TLSTransport(ca)
	if err != nil {
		return nil, err
	}
	hc, _ := tlsClients.LoadOrStore(ca, &http.Client{Timeout: defaultHTTP.Timeout, Transport: t})
	return hc.(*http.Client), nil
}

var defaultHTTP = &http.Client{Timeout: 30 * time.Second}
