package coordinator

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a server certificate for 127.0.0.1 signed by ca, and its
// key (mode 0600), into dir, and returns their paths.
func (ca *testCA) issue(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// serveCoordinator runs a coordinator with cfg on 127.0.0.1 through
// Serve, as `llmgw coordinator` does, and returns its address.
func serveCoordinator(t *testing.T, cfg Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(ctx, cfg, testTokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		db.Close()
	})
	return ln.Addr().String()
}

// rewriter is the attacker between a node and the coordinator: a reverse
// proxy that swaps the catalog's source for its own.
func rewriter(target *url.URL, upstream http.RoundTripper) *httputil.ReverseProxy {
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = upstream
	p.ModifyResponse = func(r *http.Response) error {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		b = bytes.ReplaceAll(b, []byte("real.gguf"), []byte("evil.gguf"))
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	return p
}

// TestTLSDefeatsARewritingProxy puts the attack of the issue between a
// client and the coordinator: a proxy on the path that rewrites the
// catalog's answer. Over plain HTTP it works (the baseline, so the proxy is
// known to bite); with TLS and a client that trusts only the cluster's CA,
// the client refuses the proxy, or, if the proxy only forwards, gets the
// true answer.
func TestTLSDefeatsARewritingProxy(t *testing.T) {
	ctx := context.Background()
	const real = "hf:org/repo/real.gguf"

	// Baseline: plain HTTP, rewritten.
	plain := serveCoordinator(t, Config{})
	if _, err := (&api.Client{BaseURL: "http://" + plain, Token: testTokens.Admin}).PutModel(ctx, api.Model{Name: "m", Source: real}); err != nil {
		t.Fatal(err)
	}
	mitm := httptest.NewServer(rewriter(&url.URL{Scheme: "http", Host: plain}, http.DefaultTransport))
	defer mitm.Close()
	models, err := (&api.Client{BaseURL: mitm.URL}).Models(ctx)
	if err != nil || len(models) != 1 || models[0].Source != "hf:org/repo/evil.gguf" {
		t.Fatalf("baseline over plain HTTP: %+v, %v; the proxy should have rewritten the answer", models, err)
	}

	// TLS, with a CA the clients are given.
	dir := t.TempDir()
	ca := newTestCA(t, "cluster CA")
	caFile := filepath.Join(dir, "ca.crt")
	os.WriteFile(caFile, ca.pem, 0o644)
	certFile, keyFile := ca.issue(t, dir, "coordinator")
	addr := serveCoordinator(t, Config{TLSCert: certFile, TLSKey: keyFile})
	admin := &api.Client{BaseURL: "https://" + addr, Token: testTokens.Admin, TLSCA: caFile}
	if _, err := admin.PutModel(ctx, api.Model{Name: "m", Source: real}); err != nil {
		t.Fatalf("models add over TLS: %v", err)
	}

	// The attacker terminates TLS with a certificate of its own CA.
	evilCA := newTestCA(t, "attacker CA")
	ecert, ekey := evilCA.issue(t, dir, "attacker")
	pair, err := tls.LoadX509KeyPair(ecert, ekey)
	if err != nil {
		t.Fatal(err)
	}
	upstream := http.DefaultTransport.(*http.Transport).Clone()
	upstream.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	evil := httptest.NewUnstartedServer(rewriter(&url.URL{Scheme: "https", Host: addr}, upstream))
	evil.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	evil.StartTLS()
	defer evil.Close()
	models, err = (&api.Client{BaseURL: evil.URL, TLSCA: caFile}).Models(ctx)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("through a TLS proxy with another CA's certificate: %+v, %v; want a certificate error", models, err)
	}

	// The attacker on the plain-HTTP path: a client given the CA refuses
	// http:// outright, so the request never leaves.
	_, err = (&api.Client{BaseURL: mitm.URL, TLSCA: caFile}).Models(ctx)
	if err == nil || !strings.Contains(err.Error(), "https://") {
		t.Errorf("a client with tls_ca and an http:// URL: %v; want a refusal naming https://", err)
	}
	// The same through the environment, as the command line reads it.
	t.Setenv(api.TLSCAEnv, caFile)
	if _, err := (&api.Client{BaseURL: mitm.URL}).Models(ctx); err == nil {
		t.Errorf("a client with %s set spoke plain HTTP", api.TLSCAEnv)
	}

	// A proxy that only forwards bytes can neither read nor change them:
	// the client gets the true answer.
	fwd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	go func() {
		for {
			c, err := fwd.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	models, err = (&api.Client{BaseURL: "https://" + fwd.Addr().String(), TLSCA: caFile}).Models(ctx)
	if err != nil || len(models) != 1 || models[0].Source != real {
		t.Errorf("through a forwarding proxy: %+v, %v; want the true source %s", models, err, real)
	}
}

// TestPlainHTTPBeyondLoopback: serving plain HTTP on an address others
// reach needs insecure_http = true; a key file others may read is refused.
func TestPlainHTTPBeyondLoopback(t *testing.T) {
	ctx := context.Background()
	open := func(cfg Config) error {
		db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		srv, err := New(ctx, cfg, testTokens, db, nil)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(sctx, ln) }()
		// Serving is shown by an answer on loopback; a refusal by Serve
		// returning.
		port := ln.Addr().(*net.TCPAddr).Port
		hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		for {
			select {
			case err := <-done:
				cancel()
				return err
			default:
			}
			for _, scheme := range []string{"http", "https"} {
				if resp, err := hc.Get(scheme + "://127.0.0.1:" + strconv.Itoa(port) + "/healthz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						cancel()
						return <-done
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := open(Config{}); err == nil || !strings.Contains(err.Error(), "insecure_http = true") || !strings.Contains(err.Error(), "tls_cert") {
		t.Errorf("plain HTTP on 0.0.0.0: %v; want a refusal naming tls_cert and insecure_http = true", err)
	}
	if err := open(Config{InsecureHTTP: true}); err != nil {
		t.Errorf("plain HTTP on 0.0.0.0 with insecure_http: %v", err)
	}
	dir := t.TempDir()
	cert, key := newTestCA(t, "ca").issue(t, dir, "coordinator")
	if err := open(Config{TLSCert: cert, TLSKey: key}); err != nil {
		t.Errorf("TLS on 0.0.0.0: %v", err)
	}
	os.Chmod(key, 0o644)
	if err := open(Config{TLSCert: cert, TLSKey: key}); err == nil || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Errorf("a 0644 key: %v; want a refusal naming chmod 600 %s", err, key)
	}
	if err := open(Config{TLSCert: cert}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("a certificate without a key: %v", err)
	}
}

// TestTLSCertificateRenewedInPlace: a certificate renewed in its files
// (replaced by rename, as certbot and cert-manager do) is served without a
// restart, and a renewal that does not load keeps the one that works.
func TestTLSCertificateRenewedInPlace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t, "CA 2025"), newTestCA(t, "CA 2026")
	oldCAFile, newCAFile := filepath.Join(dir, "old-ca.crt"), filepath.Join(dir, "new-ca.crt")
	os.WriteFile(oldCAFile, oldCA.pem, 0o644)
	os.WriteFile(newCAFile, newCA.pem, 0o644)
	certFile, keyFile := oldCA.issue(t, dir, "coordinator")
	addr := serveCoordinator(t, Config{TLSCert: certFile, TLSKey: keyFile})
	client := func(ca string) *api.Client {
		// A fresh client per call: a kept-alive connection would not
		// handshake again.
		return &api.Client{BaseURL: "https://" + addr, Token: testTokens.Admin, TLSCA: ca}
	}
	if _, err := client(oldCAFile).Models(ctx); err != nil {
		t.Fatalf("before the renewal: %v", err)
	}

	renewedCert, renewedKey := newCA.issue(t, dir, "renewed")
	if err := os.Rename(renewedKey, keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(renewedCert, certFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := client(newCAFile).Models(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the renewal the coordinator still serves the old certificate: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A renewal that does not load: the key of another certificate.
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: logrus.New()}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	good := r.cert
	_, otherKey := oldCA.issue(t, dir, "other")
	if err := os.Rename(otherKey, keyFile); err != nil {
		t.Fatal(err)
	}
	r.checked = time.Time{}
	got, err := r.get(nil)
	if err != nil || got != good {
		t.Errorf("after a renewal with a mismatched key: %p, %v; want the certificate that loaded before (%p), no error", got, err, good)
	}
}
