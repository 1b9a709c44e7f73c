package coordinator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/slurm"
)

// errDenied is the one answer to every failed authentication or
// authorisation by credential: which check failed (replayed, wrong node,
// wrong user) helps an attacker more than an operator, who has the log.
var errDenied = api.Errorf(api.CodeUnauthorized, "not authorised; the coordinator's log says why")

// caller is who a request comes from, as its credential says.
type caller struct {
	// munge: a MUNGE credential made by uid:gid on the host at addr.
	munge    bool
	uid, gid uint32
	addr     netip.Addr
	// node: the node whose per-node token the request carries.
	node string
}

type callerKey struct{}

func callerOf(r *http.Request) *caller {
	c, _ := r.Context().Value(callerKey{}).(*caller)
	return c
}

// trust is what the coordinator needs to judge MUNGE credentials: munged,
// the users allowed to report and to administer, and Slurm's nodes.
type trust struct {
	codec munge.Codec
	// agents are the uids whose credentials may post reports: root and the
	// configured agent user.
	agents map[uint32]bool
	// adminUIDs and adminGIDs may change the catalog, features and gc.
	adminUIDs, adminGIDs map[uint32]bool
	nodes                *knownNodes
	refused              prometheus.Counter
}

// newTrust resolves the configured users and groups; a name that does not
// exist is an error now rather than a silent "nobody" later.
func newTrust(ctx context.Context, cfg Config, nodes *knownNodes) (*trust, error) {
	t := &trust{
		codec:     munge.New(cfg.MungeSocket),
		agents:    map[uint32]bool{0: true},
		adminUIDs: map[uint32]bool{0: true},
		adminGIDs: map[uint32]bool{},
		nodes:     nodes,
	}
	if cfg.AgentUser != "" {
		uid, err := lookupUID(cfg.AgentUser)
		if err != nil {
			return nil, fmt.Errorf("agent_user: %w", err)
		}
		t.agents[uid] = true
	}
	users := append([]string{}, cfg.AdminUsers...)
	if cfg.SlurmUser != "" {
		users = append(users, cfg.SlurmUser)
	}
	for _, u := range users {
		uid, err := lookupUID(u)
		if err != nil {
			return nil, fmt.Errorf("admin_users: %w", err)
		}
		t.adminUIDs[uid] = true
	}
	for _, g := range cfg.AdminGroups {
		gid, err := lookupGID(g)
		if err != nil {
			return nil, fmt.Errorf("admin_groups: %w", err)
		}
		t.adminGIDs[gid] = true
	}
	return t, nil
}

// slurmUser reads SlurmUser from `scontrol show config` ("slurm(64030)").
func slurmUser(ctx context.Context, run *slurm.Runner) (string, error) {
	conf, err := run.ShowConfig(ctx)
	if err != nil {
		return "", err
	}
	v, ok := conf.Get("SlurmUser")
	if !ok || v == "" {
		return "", fmt.Errorf("scontrol show config has no SlurmUser")
	}
	if i := strings.IndexByte(v, '('); i > 0 && strings.HasSuffix(v, ")") {
		return v[i+1 : len(v)-1], nil
	}
	return v, nil
}

func lookupUID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("user %q: %w; give an existing user name or a uid", name, err)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err
}

func lookupGID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w; give an existing group name or a gid", name, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	return uint32(n), err
}

// admin says whether uid (whose credential carries gid) may administer:
// root, SlurmUser, admin_users, or a member of an admin group, by the
// credential's group or by the user's other groups as this host knows them.
func (t *trust) admin(uid, gid uint32) bool {
	if t.adminUIDs[uid] || t.adminGIDs[gid] {
		return true
	}
	if len(t.adminGIDs) == 0 {
		return false
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return false
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && t.adminGIDs[uint32(n)] {
			return true
		}
	}
	return false
}

// authenticate checks r's credential for need and returns r carrying its
// caller. A MUNGE credential is checked here; a bearer token by authorize.
func (s *Server) authenticate(r *http.Request, need role) (*http.Request, error) {
	if need == roleNone {
		return r, nil
	}
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		if node, ok := s.nodeOfToken(strings.TrimSpace(tok)); ok {
			if need == roleAdmin {
				s.log.WithFields(logrus.Fields{"path": r.URL.Path, "node": node}).Warn("refused: a node's token for an admin request")
				return r, errDenied
			}
			return r.WithContext(context.WithValue(r.Context(), callerKey{}, &caller{node: node})), nil
		}
	}
	cred, isMunge := strings.CutPrefix(h, api.MungeScheme+" ")
	if !isMunge || s.trust == nil {
		if s.trust != nil && need == roleRead {
			// With munge, every cluster user can read with a credential;
			// open reads would be the one thing a stranger can do. A
			// configured token reads too; any other header is nobody.
			tok, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || s.tokens.roleOf(strings.TrimSpace(tok)) == roleNone {
				s.log.WithField("path", r.URL.Path).Info("refused: a read without a credential")
				return r, errDenied
			}
			return r, nil
		}
		return r, s.authorize(r, need)
	}
	// The credential first: a stranger's request costs one decode, not the
	// reading of its body.
	c, err := s.trust.codec.Decode(r.Context(), strings.TrimSpace(cred))
	deny := func(why string, args ...any) (*http.Request, error) {
		s.log.WithField("path", r.URL.Path).WithField("uid", c.UID).WithField("origin", c.Addr.String()).
			Warnf("refused: "+why, args...)
		s.trust.refused.Inc()
		return r, errDenied
	}
	var me *munge.Error
	if errors.As(err, &me) && me.Status == munge.StatusSocket {
		// The coordinator's own munged did not answer: nothing is known
		// of the credential, so this is no refusal of the caller. A 401
		// here made every agent log that its token was refused while
		// munged restarted; a 503 says to try again, and tells a
		// stranger only that munged is down.
		s.log.WithField("path", r.URL.Path).WithError(err).Warn("cannot judge a MUNGE credential: munged does not answer")
		return r, api.Errorf(api.CodeUnavailable, "the coordinator cannot reach its munged; try again")
	}
	if err != nil {
		return deny("%v", err)
	}
	switch need {
	case roleAgent:
		if !s.trust.agents[c.UID] {
			return deny("uid %d may not speak for a node (root or agent_user may)", c.UID)
		}
	case roleAdmin:
		if !s.trust.admin(c.UID, c.GID) {
			return deny("uid %d is not an admin (root, SlurmUser, admin_users, admin_groups)", c.UID)
		}
	}
	body, err := readBody(r, MaxReportBytes)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return r, api.Errorf(api.CodeTooLarge, "the request is over the limit of %d bytes", MaxReportBytes)
	}
	if err != nil {
		return r, api.Errorf(api.CodeInvalid, "reading the request: %v", err)
	}
	if !bytes.Equal(c.Payload, api.MungePayload(r.Method, r.URL.RequestURI(), body)) {
		return deny("the credential was made for another request")
	}
	r.Body = &readBodyBuf{Reader: bytes.NewReader(body), b: body}
	ctx := context.WithValue(r.Context(), callerKey{}, &caller{munge: true, uid: c.UID, gid: c.GID, addr: c.Addr})
	return r.WithContext(ctx), nil
}

// speaksFor checks that r's caller may speak for node: with a MUNGE
// credential, node must be one of Slurm's and the credential must come from
// one of its addresses; with a node's token, it must be that node's. With
// munge on, nothing else speaks for a node: the admin token would let its
// holder speak for every node, which is what munge is there to stop.
// Without munge the admin token is trusted as before.
//
// With node_tokens_required only a node's own token speaks for it: root on
// any host with the munge key can start a munged with any --origin, and
// so make credentials from any node's address, as it can for Slurm itself;
// a token is a secret of the node alone (docs/design.md, §5).
func (s *Server) speaksFor(r *http.Request, node string) error {
	c := callerOf(r)
	if c != nil && c.node != "" {
		if c.node == node {
			return nil
		}
		s.log.WithFields(logrus.Fields{"node": node, "token_of": c.node}).Warn("refused: a node's token speaking for another node")
		return errDenied
	}
	if s.cfg.NodeTokensRequired {
		if s.trust != nil {
			s.trust.refused.Inc()
		}
		f := logrus.Fields{"node": node}
		if c != nil && c.munge {
			f["origin"] = c.addr.String()
		}
		s.log.WithFields(f).Warn("refused: node_tokens_required, and the request for the node carries no token of its own (MUNGE credentials and the admin token speak for no node)")
		return errDenied
	}
	if c == nil || !c.munge {
		if s.trust != nil {
			s.trust.refused.Inc()
			s.log.WithField("node", node).Warn("refused: the admin token speaking for a node while munge is on")
			return errDenied
		}
		return nil
	}
	if !c.addr.IsValid() || c.addr.IsUnspecified() {
		// munged puts 0.0.0.0 in a credential when it could not find its
		// own host's address: such a credential says nothing about where
		// it came from, whatever a node's address resolves to.
		s.trust.refused.Inc()
		s.log.WithField("node", node).Warn("refused: a credential with no origin address (its munged could not resolve its host; set munged --origin)")
		return errDenied
	}
	addrs, known := s.trust.nodes.lookup(r.Context(), node)
	if !known {
		s.trust.refused.Inc()
		s.log.WithFields(map[string]any{"node": node, "origin": c.addr.String()}).Warn("refused: a report for a node Slurm does not know")
		return errDenied
	}
	for _, a := range addrs {
		if a == c.addr {
			return nil
		}
	}
	s.trust.refused.Inc()
	s.log.WithFields(map[string]any{"node": node, "origin": c.addr.String(), "node_addrs": fmt.Sprint(addrs)}).
		Warn("refused: a credential from another host speaking for a node")
	return errDenied
}

// initTrust reads Slurm's node list when munge_socket or fabric_features
// needs it, and turns on MUNGE authentication when munge_socket is set. The
// node list is Slurm's unless cfg.Nodes gives another, and SlurmUser, when
// not configured, is asked of Slurm.
func (s *Server) initTrust(ctx context.Context) error {
	if err := s.loadNodeTokens(ctx); err != nil {
		return err
	}
	cfg := s.cfg
	if cfg.MungeSocket == "" && len(cfg.FabricFeatures) == 0 {
		return nil
	}
	run := &slurm.Runner{Paths: map[string]string{"scontrol": cfg.Scontrol, "sinfo": cfg.Sinfo}}
	if cfg.SlurmConf != "" {
		run.Env = []string{"SLURM_CONF=" + cfg.SlurmConf}
	}
	// One node list for both: the addresses MUNGE credentials must come
	// from, and the features fabric_features reads fabrics from.
	src := cfg.Nodes
	if src == nil {
		src = SlurmNodes{Run: run}
	}
	s.known = newKnownNodes(src)
	// The server's clock, which tests set, judges the list's age too.
	s.known.now = func() time.Time { return s.now() }
	if len(cfg.FabricFeatures) > 0 {
		s.log.WithField("fabric_features", cfg.FabricFeatures).Info("nodes' fabrics are taken from Slurm's node features")
	}
	if cfg.MungeSocket == "" {
		return nil
	}
	if cfg.SlurmUser == "" {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		u, err := slurmUser(sctx, run)
		cancel()
		if err != nil {
			s.log.WithError(err).Warn("could not read SlurmUser from Slurm; until slurm_user is set, only root and admin_users/admin_groups administer")
		}
		cfg.SlurmUser = u
	}
	t, err := newTrust(ctx, cfg, s.known)
	if err != nil {
		return err
	}
	t.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmgw_coordinator_auth_refused_total",
		Help: "Requests with a MUNGE credential that was refused: undecodable, replayed, for another request, from a user or host not allowed.",
	})
	s.metrics.reg.MustRegister(t.refused)
	s.trust = t
	t.nodes.onRead = s.forgetLeft
	s.log.WithFields(logrus.Fields{"munge_socket": t.codec.Socket(), "slurm_user": cfg.SlurmUser}).Info("MUNGE authentication on")
	return nil
}

// loadNodeTokens reads the per-node tokens' digests into memory: every
// report with a bearer token looks its token up.
func (s *Server) loadNodeTokens(ctx context.Context) error {
	m, err := s.db.NodeTokens(ctx)
	if err != nil {
		return err
	}
	s.nodeTokens.Store(&m)
	return nil
}

// nodeOfToken says whose per-node token tok is. The lookup is by the
// token's sha256, so its timing tells nothing about the token.
func (s *Server) nodeOfToken(tok string) (string, bool) {
	m := s.nodeTokens.Load()
	if m == nil || len(*m) == 0 || tok == "" {
		return "", false
	}
	node, ok := (*m)[sha256.Sum256([]byte(tok))]
	return node, ok
}

// newNodeToken makes node a new token, replacing its old one, and returns
// it; only its digest is stored.
func (s *Server) newNodeToken(ctx context.Context, node string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := "llmgw-node-" + hex.EncodeToString(b[:])
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.db.SetNodeToken(ctx, node, sha256.Sum256([]byte(tok)), s.now()); err != nil {
		return "", err
	}
	if err := s.loadNodeTokens(ctx); err != nil {
		return "", err
	}
	return tok, nil
}
