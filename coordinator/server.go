package coordinator

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	jsonv2 "encoding/json/v2"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/prefetch"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/placement"
)

// Body limits. A report of MaxWeights weights with long paths is about a
// megabyte; anything far larger is a broken or hostile agent, refused before
// it is read into memory.
const (
	MaxReportBytes = 8 << 20
	MaxModelBytes  = 64 << 10
	// MaxCatalogEntryBytes bounds one catalog entry: a Hub repository's
	// list of up to catalog.MaxHubFiles files is a few hundred kilobytes.
	MaxCatalogEntryBytes = 2 << 20
)

// Server is the coordinator's HTTP service over one store.
type Server struct {
	cfg        Config
	tokens     Tokens
	db         *store.DB
	log        *logrus.Logger
	view       *view
	metrics    *metrics
	staleAfter time.Duration
	now        func() time.Time

	// writeMu is held across each database write and the view change that
	// follows it (see view).
	writeMu sync.Mutex
	queue   chan *queued
	// batches and batched count the writer's commits and the reports in
	// them: their ratio is the group commit's batch size, which the
	// benchmarks print, since a commit's cost is shared by its batch.
	batches, batched atomic.Int64
	// gc holds the gc requests not yet handed to every node they ask.
	gc gcPending
	// seeds holds the seed requests still asking nodes (seed.go).
	seeds seedPending
	// grants are the copies granted for eviction (evict.go).
	grants grants
	// swarms are the fabrics' swarms (swarm.go).
	swarms *swarms
	// dbOK is false after a write failed, until one succeeds: readiness
	// then answers 503 so a load balancer or operator sees it.
	dbOK atomic.Bool

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	// trust judges MUNGE credentials (auth.go); nil when munge is off.
	trust *trust
	// known is Slurm's node list (identity.go), read for MUNGE and for
	// fabric_features; nil with neither.
	known *knownNodes
	// instance names this process in swarm plans (api.SwarmPlan.Instance).
	instance string
	// nodeTokens maps each per-node token's sha256 to its node (auth.go).
	nodeTokens atomic.Pointer[map[[32]byte]string]
	// forgetting is true while forgetLeft runs.
	forgetting atomic.Bool

	// reads holds a slot per expensive read in progress (see
	// expensiveRead); readWait is how long a read waits for one.
	reads    chan struct{}
	readWait time.Duration

	// tls is the server's TLS configuration; nil serves plain HTTP.
	tls *tls.Config

	// features is the Slurm feature reconciler; nil when it is off.
	features *features
	// prefetch reads backfill's plans and keeps the prefetch asks (issue
	// 28); nil when it is off. prefetchStop ends its loop.
	prefetch     *prefetch.Prefetcher
	prefetchStop context.CancelFunc
	prefetchDone chan struct{}
	// notifySocket is $NOTIFY_SOCKET: under systemd (Type=notify) Serve
	// says READY=1 once it accepts connections, so units ordered after the
	// coordinator start when it can answer.
	notifySocket string
}

// New returns a server over db, loading its view from it, and starts the
// goroutine that writes reports. Close stops that goroutine; it does not
// close db.
func New(ctx context.Context, cfg Config, tokens Tokens, db *store.DB, log *logrus.Logger) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = logrus.New()
		log.SetOutput(io.Discard)
	}
	if cfg.FeatureSetsMax != 0 {
		log.Warnf("feature_sets_max = %d is ignored: llmgw writes presence as ActiveFeatures, which adds no node config "+
			"record, so no model is withheld any more; remove the setting", cfg.FeatureSetsMax)
	}
	s := &Server{
		cfg: cfg, tokens: tokens, db: db, log: log, view: newView(),
		staleAfter: placement.StaleAfter(cfg.ReportInterval),
		swarms:     newSwarms(),
		instance:   uuid.NewString(),
		now:        time.Now,
		queue:      make(chan *queued, 4*cfg.MaxBatch),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		reads:      make(chan struct{}, MaxConcurrentReads()),
		readWait:   time.Second,

		notifySocket: os.Getenv("NOTIFY_SOCKET"),
	}
	tlsConf, err := loadTLS(cfg, log)
	if err != nil {
		return nil, err
	}
	s.tls = tlsConf
	// An agent whose clock went back is heard again once its node is stale.
	db.ReplaceAfter = s.staleAfter
	if err := s.view.load(ctx, db); err != nil {
		return nil, fmt.Errorf("load state from %s: %w", db.Path(), err)
	}
	if err := s.loadGC(ctx); err != nil {
		return nil, fmt.Errorf("load gc requests from %s: %w", db.Path(), err)
	}
	if err := s.loadSeeds(ctx); err != nil {
		return nil, fmt.Errorf("load seed requests from %s: %w", db.Path(), err)
	}
	s.dbOK.Store(true)
	s.metrics = newMetrics(s)
	if err := s.initTrust(ctx); err != nil {
		return nil, err
	}
	if cfg.Features {
		s.features = newFeatures(s)
	}
	if cfg.prefetchOn() {
		s.prefetch = newPrefetcher(s)
	}
	go s.writer()
	return s, nil
}

// Close stops the report writer after it has answered every report queued,
// the swarms' expiry, and the feature reconciler.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.swarms.stopped()
	s.features.wait()
	if s.prefetchStop != nil {
		s.prefetchStop()
		<-s.prefetchDone
	}
}

// Handler is the coordinator's HTTP API.
//
// Routes: POST /v1/reports (the node's own token, or the admin token); GET /v1/models,
// GET /v1/status, GET /v1/status/{model}, GET /v1/placement (open, or any
// token when a read token is configured); PUT and DELETE /v1/models/{name}
// and POST /v1/features[?dry_run=1] (admin token); POST /v1/gc (admin
// token), GET /v1/gc/{id} (read), POST /v1/gc/{id}/answers (agent token):
// see gc.go; POST /v1/seed (admin token), GET /v1/seed/{id} (read): see
// seed.go; GET /v1/prefetch/jobs/{id} (read): see prefetchwire.go;
// GET /healthz, /readyz and /metrics (always open).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.route(mux, "POST /v1/reports", roleAgent, s.postReport)
	s.route(mux, "POST /v1/swarm", roleAgent, s.postSwarm)
	s.route(mux, "GET /v1/models", roleRead, s.getModels)
	s.route(mux, "PUT /v1/models/{name}", roleAdmin, s.putModel)
	s.route(mux, "DELETE /v1/models/{name}", roleAdmin, s.deleteModel)
	s.route(mux, "POST /v1/models/{name}/rename", roleAdmin, s.renameModel)
	s.route(mux, "GET /v1/status", roleRead, s.getStatus)
	s.route(mux, "GET /v1/status/{model}", roleRead, s.getModelStatus)
	s.route(mux, "POST /v1/gc", roleAdmin, s.postGC)
	s.route(mux, "GET /v1/gc/{id}", roleRead, s.getGC)
	s.route(mux, "POST /v1/gc/{id}/answers", roleAgent, s.postGCAnswer)
	s.route(mux, "POST /v1/evict", roleAgent, s.postEvict)
	s.route(mux, "POST /v1/seed", roleAdmin, s.postSeed)
	s.route(mux, "GET /v1/seed/{id}", roleRead, s.getSeed)
	s.route(mux, "POST /v1/features", roleAdmin, s.postFeatures)
	s.route(mux, "GET /v1/prefetch/jobs/{id}", roleRead, s.getWarm)
	s.route(mux, "GET /v1/placement", roleRead, s.getPlacement)
	s.route(mux, "DELETE /v1/nodes/{node}", roleAdmin, s.deleteNode)
	s.route(mux, "POST /v1/nodes/{node}/token", roleAdmin, s.postNodeToken)
	s.routePins(mux)
	s.route(mux, "GET /healthz", roleNone, func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	s.route(mux, "GET /readyz", roleNone, s.ready)
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: s.log})
	s.route(mux, "GET /metrics", roleNone, func(w http.ResponseWriter, r *http.Request) error {
		metrics.ServeHTTP(w, r)
		return nil
	})
	s.route(mux, "/", roleNone, func(w http.ResponseWriter, r *http.Request) error {
		return api.Errorf(api.CodeNotFound, "no such endpoint: %s %s; the API is under /%s", r.Method, r.URL.Path, api.Version)
	})
	return mux
}

// Run serves on cfg.Listen until ctx ends, then shuts down gracefully:
// requests in flight get a few seconds to finish and every queued report
// is written before Run returns.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener the caller opened; with TLS configured it
// speaks TLS on it.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.checkPlainHTTP(ln.Addr()); err != nil {
		ln.Close()
		s.Close()
		return err
	}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	srv := &http.Server{
		Handler: s.Handler(),
		// Slow clients must not hold connections open: agents send small
		// bodies, and a status answer is written in well under a second.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	s.log.WithFields(logrus.Fields{"listen": ln.Addr().String(), "db": s.db.Path()}).Info("coordinator serving")
	if s.features != nil {
		// Started with serving, not in New: a server that is never served
		// (a test driving its handler) must not rewrite Slurm's features.
		s.features.start(s.stop)
	}
	if s.prefetch != nil && s.prefetchStop == nil {
		// Started with serving too: it calls squeue.
		pctx, cancel := context.WithCancel(context.Background())
		s.prefetchStop, s.prefetchDone = cancel, make(chan struct{})
		go func() {
			defer close(s.prefetchDone)
			s.prefetch.Run(pctx)
		}()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The listener is open and the state loaded (New), so a connection made
	// now is answered: that is ready.
	if sent, err := sdNotify(s.notifySocket, "READY=1"); err != nil {
		s.log.WithError(err).Warn("could not tell systemd the coordinator is ready")
	} else if sent {
		s.log.Debug("told systemd the coordinator is ready")
	}
	select {
	case err := <-errc:
		s.Close()
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if _, err := sdNotify(s.notifySocket, "STOPPING=1"); err != nil {
		s.log.WithError(err).Debug("sd_notify STOPPING")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	s.Close()
	s.log.Info("coordinator stopped")
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// statusWriter remembers the status for the log line and the latency metric.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// route registers h under pattern with what every route gets: a request
// id, the token check for need, the JSON error answer, a log line and the
// latency metric labelled by the pattern (never by the raw path, which
// would put model names from strangers into label values).
func (s *Server) route(mux *http.ServeMux, pattern string, need role, h handlerFunc) {
	label := pattern
	if label == "/" {
		label = "other"
	}
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := uuid.NewString()
		w.Header().Set("X-Request-Id", id)
		sw := &statusWriter{ResponseWriter: w}
		r, err := s.authenticate(r, need)
		if err == nil && expensiveRead[pattern] {
			var release func()
			if release, err = s.readSlot(r.Context()); err == nil {
				defer release()
			} else {
				sw.Header().Set("Retry-After", "1")
			}
		}
		if err == nil {
			err = h(sw, r)
		}
		if err != nil {
			s.writeError(sw, r, id, err)
		}
		took := time.Since(start)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.latency.WithLabelValues(label, fmt.Sprint(code)).Observe(took.Seconds())
		level := logrus.InfoLevel
		switch {
		case code >= 500:
			level = logrus.ErrorLevel
		case code >= 400:
			level = logrus.WarnLevel
		case pattern == "POST /v1/reports", pattern == "GET /metrics", pattern == "GET /healthz", pattern == "GET /readyz":
			// Thousands a second on a big cluster: debug only.
			level = logrus.DebugLevel
		}
		// Checked first: building the entry costs more than the rest of
		// an unchanged report's handling.
		if !s.log.IsLevelEnabled(level) {
			return
		}
		entry := s.log.WithFields(logrus.Fields{
			"request_id": id, "method": r.Method, "route": label, "path": r.URL.Path,
			"status": code, "duration_ms": float64(took.Microseconds()) / 1000, "remote": r.RemoteAddr,
		})
		if err != nil {
			entry = entry.WithField("error", err.Error())
		}
		entry.Log(level, "request")
	})
}

// writeError answers err as JSON. An *api.Error keeps its code; anything
// else is an internal error whose details go to the log, not the client.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = api.Errorf(api.CodeInternal, "internal error; the coordinator's log has the details under request id %s", id)
	}
	if ae.Code == api.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="llmgw"`)
	}
	writeJSON(w, api.HTTPStatus(ae.Code), ae)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

// authorize checks r's bearer token against need. Writes are refused
// outright when the server has no token for them: an unauthenticated write
// path on a cluster service is a hole, and the message says how to close
// it properly instead.
func (s *Server) authorize(r *http.Request, need role) error {
	if need == roleNone || need == roleRead && s.tokens.Read == "" {
		return nil
	}
	if need == roleAdmin && s.tokens.Admin == "" {
		return api.Errorf(api.CodeForbidden, "catalog changes are refused: this coordinator has no admin token; start it with --admin-token-file FILE and pass the same token with --token-file")
	}
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if auth == "" || !ok || strings.TrimSpace(tok) == "" {
		if need == roleAgent {
			// A node's own token is the only bearer token an agent has.
			return api.Errorf(api.CodeUnauthorized, "%s needs the node's own token ('llmgw nodes token NODE --out FILE', "+
				"installed as agent.toml's token_file) or a MUNGE credential (munge_socket)", what(r, need))
		}
		return api.Errorf(api.CodeUnauthorized, "%s needs a bearer token: pass --token-file FILE or set LLMGW_TOKEN_FILE", what(r, need))
	}
	got := s.tokens.roleOf(strings.TrimSpace(tok))
	switch {
	case got == roleNone:
		// One answer for a wrong token and a token of the wrong role
		// (errDenied, auth.go): which role a token has is the holder's
		// business, not a stranger's to learn by trying it.
		return errDenied
	case got < need:
		return errDenied
	}
	return nil
}

func what(req *http.Request, r role) string {
	switch {
	case strings.HasPrefix(req.URL.Path, "/v1/gc") && r == roleAdmin:
		return "asking nodes to gc"
	case strings.HasPrefix(req.URL.Path, "/v1/gc") && r == roleAgent:
		return "answering a gc request"
	case strings.HasPrefix(req.URL.Path, "/v1/seed") && r == roleAdmin:
		return "asking nodes to seed a model"
	}
	switch r {
	case roleAgent:
		return "posting a report"
	case roleAdmin:
		return "changing the catalog or Slurm's features"
	}
	return "reading"
}

func (r role) String() string {
	switch r {
	case roleRead:
		return "read"
	case roleAgent:
		return "agent"
	case roleAdmin:
		return "admin"
	}
	return "no"
}

// decode reads one JSON value of at most limit bytes into v, strictly: an
// unknown field is an error (a misspelt field silently dropped is a setting
// nobody chose), and so is anything after the value.
//
// The body is read whole and unmarshalled from memory: a streaming decoder
// grew and copied its buffer several times per report, which with the
// reads themselves was a fifth of a first report's cost at the coordinator
// (BenchmarkCoordinatorMunge, pprof). A body authenticate already read is
// taken as it is.
func decode(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.CodeInvalid, "%s must be application/json, not %s", what, ct)
	}
	if r.ContentLength > limit {
		return api.Errorf(api.CodeTooLarge, "%s is %d bytes; the limit is %d", what, r.ContentLength, limit)
	}
	body, err := readBody(r, limit)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeTooLarge, "%s is over the limit of %d bytes", what, limit)
		}
		return api.Errorf(api.CodeInvalid, "reading the %s: %v", what, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return api.Errorf(api.CodeInvalid, "%s is empty; send a JSON object", what)
	}
	if g, ok := v.(interface{ gotBody([]byte) }); ok {
		g.gotBody(body)
	}
	if err := unmarshalStrict(body, v); err != nil {
		if strings.Contains(err.Error(), "after top-level value") {
			// Said as the streaming decoder said it: two values are
			// one mistake, not a syntax error somewhere in the second.
			err = errors.New("more data after the JSON value")
		}
		return api.Errorf(api.CodeInvalid, "%s is not the JSON expected: %v", what, err)
	}
	return nil
}

// unmarshalStrict is encoding/json's Unmarshal (v1 semantics: field names
// matched without regard to case, as the decoder did) that refuses unknown
// fields and anything after the value.
func unmarshalStrict(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, json.DefaultOptionsV1(), jsonv2.RejectUnknownMembers(true))
}

// readBody is r's body, at most limit bytes (an *http.MaxBytesError
// beyond), read in one allocation when its length is announced.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if rb, ok := r.Body.(*readBodyBuf); ok {
		if int64(len(rb.b)) > limit {
			return nil, &http.MaxBytesError{Limit: limit}
		}
		return rb.b, nil
	}
	n := r.ContentLength
	if n < 0 || n > limit {
		n = 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return buf.Bytes(), nil
}

// readBodyBuf is a body already read into memory (by authenticate), which
// decode takes without reading it again.
type readBodyBuf struct {
	*bytes.Reader
	b []byte
}

func (*readBodyBuf) Close() error { return nil }

func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// The write first: it looks at the files before sqlite does, and a
	// read of a database gone read-only is what can crash the process
	// (store/freeze.go).
	if err := s.db.CanWrite(ctx); err != nil {
		s.metrics.dbErrors.WithLabelValues("ping").Inc()
		s.log.WithError(err).Error("database read-only")
		return api.Errorf(api.CodeUnavailable, "%v; reports and catalog changes would fail", err)
	}
	if err := s.db.Ping(ctx); err != nil {
		s.metrics.dbErrors.WithLabelValues("ping").Inc()
		s.log.WithError(err).Error("database unusable")
		return api.Errorf(api.CodeUnavailable, "database unusable: %v", err)
	}
	if !s.dbOK.Load() {
		return api.Errorf(api.CodeUnavailable, "the last database write failed; see the coordinator's log")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// expensiveRead are the routes whose answer is computed over every node:
// open to any reader, and each costs memory and CPU in proportion to the
// cluster. Sixteen placement reads at once took a coordinator from 326 MB
// to 3.6 GB; they now take a slot each (readSlot).
var expensiveRead = map[string]bool{
	"GET /v1/status":         true,
	"GET /v1/status/{model}": true,
	"GET /v1/placement":      true,
}

// MaxConcurrentReads is how many expensive reads run at once: twice the
// cores, and at least 4. More would only queue for the CPU while each
// holds its answer in memory.
func MaxConcurrentReads() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// readSlot waits up to readWait for a slot for an expensive read, and
// returns the function that gives it back; with none free it answers 503,
// and the route adds Retry-After. Reports never wait here: they are what
// the coordinator is for.
func (s *Server) readSlot(ctx context.Context) (func(), error) {
	release := func() { <-s.reads }
	select {
	case s.reads <- struct{}{}:
		return release, nil
	default:
	}
	t := time.NewTimer(s.readWait)
	defer t.Stop()
	select {
	case s.reads <- struct{}{}:
		return release, nil
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, api.Errorf(api.CodeUnavailable, "the coordinator is answering %d reads of status and placement already; retry in a second", cap(s.reads))
}
