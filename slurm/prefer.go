package slurm

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxExpression is the longest --constraint, --prefer or --comment string
// Slurm 22.05 accepts: 1024 characters pass, 1025 are rejected at submit
// (docs/slurm/behaviour.md §2).
const MaxExpression = 1024

// CommentTag is how a job's comment names its model when the SPANK plugin
// is not loaded: the Prolog and Epilog see SLURM_JOB_COMMENT, not the job's
// environment (docs/design.md §3).
const CommentTag = "llmgw:model="

// ComposedTag in a job's comment says llmgw sbatch composed the job from
// live features (sinfo) and the coordinator's placement, so job_submit.lua,
// which has only the published feature file, leaves the job as it is. In
// particular it must not add back a preference that llmgw sbatch left out
// or that Slurm has just refused.
const ComposedTag = "llmgw:composed"

// FeatureNode is one node as composition sees it: the partitions it is in
// and its active features.
type FeatureNode struct {
	Name       string   `json:"name"`
	Partitions []string `json:"partitions"`
	Features   []string `json:"features"`
}

// ComposeInput is what a submission asked for and what the cluster looks
// like now.
type ComposeInput struct {
	// Model is the model the job uses; it must satisfy
	// catalog.ValidModelName (the caller checks; slurm imports no catalog).
	Model string `json:"model"`
	// Prefix starts every node feature llmgw owns (placement.FeaturePrefix:
	// the caller passes it, since slurm imports no llmgw package); a node
	// that can serve Model carries Prefix+Model. job_submit.lua repeats it
	// (its PREFIX), and the compose tests run both on the same cases.
	Prefix string `json:"prefix"`

	// The user's own sbatch options, as given ("" or nil when absent).
	Constraint string   `json:"constraint,omitempty"` // --constraint / -C
	Prefer     string   `json:"prefer,omitempty"`     // --prefer
	Nodes      int      `json:"nodes,omitempty"`      // the minimum of -N/--nodes; 0 means 1
	Exclude    []string `json:"exclude,omitempty"`    // --exclude, expanded
	NodeList   bool     `json:"nodelist,omitempty"`   // -w/--nodelist given: the user chose the nodes
	Comment    string   `json:"comment,omitempty"`    // --comment

	// Partitions the job may run in: the user's --partition list, or the
	// cluster's default partition. Empty means every node below counts.
	Partitions []string `json:"partitions,omitempty"`

	// Cluster is the nodes with their current active features.
	Cluster []FeatureNode `json:"cluster"`

	// Complete says Cluster holds every feature of every node (read from
	// sinfo, or from a feature file whose header says features=all). False
	// means it holds only llmgw's own features (a feature file written by an
	// older coordinator): a user expression that names any other feature
	// cannot then be checked, so no preference is added.
	Complete bool `json:"complete,omitempty"`

	// NoRoom are nodes that lack cache room for the model and do not hold
	// it (the coordinator's answer); they are excluded.
	NoRoom []string `json:"no_room,omitempty"`

	// Spank says the SPANK plugin is loaded, so --llmgw-model records the
	// model; otherwise the comment is tagged.
	Spank bool `json:"spank,omitempty"`

	// Composed adds ComposedTag to the comment (llmgw sbatch sets it).
	Composed bool `json:"composed,omitempty"`
}

// Composition is what to add to a submission. Empty fields add nothing.
type Composition struct {
	// Prefer replaces the job's --prefer ("" leaves it as it was). It
	// already contains the user's constraint and preference.
	Prefer string `json:"prefer"`
	// Exclude is the whole --exclude list, the user's merged with the
	// nodes llmgw excludes, sorted; nil leaves it as it was.
	Exclude []string `json:"exclude"`
	// Comment replaces the job's --comment ("" leaves it as it was).
	Comment string `json:"comment"`
	// SpankModel is the value for --llmgw-model ("" adds none).
	SpankModel string `json:"spank_model"`
	// Holders is how many nodes the preference asks for (k in
	// Prefix+M*k), 0 without one.
	Holders int `json:"holders"`
	// Notes say what was decided and why, one line each, for the user.
	Notes []string `json:"-"`
}

// Compose decides what llmgw adds to a job for in.Model: a --prefer only
// when the current features can satisfy it (Slurm 22.05 rejects a job whose
// preference no node set can meet, and lets a satisfiable preference
// replace --constraint, so the user's constraint is folded in), the nodes
// to exclude, and the model recorded for the hooks. It does no I/O.
//
// It never adds anything that can make Slurm reject a job the user's own
// options would have let through: when it cannot tell, it adds no
// preference and says why in Notes.
func Compose(in ComposeInput) Composition {
	var out Composition
	note := func(format string, args ...any) { out.Notes = append(out.Notes, fmt.Sprintf(format, args...)) }
	feature := in.Prefix + in.Model
	n := max(in.Nodes, 1)

	// The model for the hooks comes first: it matters even when no
	// preference can be added.
	var tags []string
	if in.Spank {
		out.SpankModel = in.Model
	} else if !hasToken(in.Comment, CommentTag+in.Model) {
		tags = append(tags, CommentTag+in.Model)
	}
	if in.Composed && !hasToken(in.Comment, ComposedTag) {
		tags = append(tags, ComposedTag)
	}
	// Over Slurm's cap, the marker goes first: the model matters more.
	for len(tags) > 0 {
		c := strings.Join(append([]string{in.Comment}, tags...), " ")
		if in.Comment == "" {
			c = strings.Join(tags, " ")
		}
		if len(c) <= MaxExpression {
			out.Comment = c
			break
		}
		note("comment not tagged with %s: %d characters would pass Slurm's limit of %d", tags[len(tags)-1], len(c), MaxExpression)
		tags = tags[:len(tags)-1]
	}

	userExcl := map[string]bool{}
	for _, x := range in.Exclude {
		userExcl[x] = true
	}
	held := map[string]bool{}
	for _, nd := range in.Cluster {
		if slices.Contains(nd.Features, feature) {
			held[nd.Name] = true
		}
	}
	// Never exclude a node that holds the model: holding it is what used
	// the room.
	var ours []string
	for _, x := range in.NoRoom {
		if !held[x] && !userExcl[x] && !slices.Contains(ours, x) {
			ours = append(ours, x)
		}
	}

	var expr *featureExpr
	var exprErr error
	switch {
	case in.NodeList:
		exprErr = fmt.Errorf("the job names its nodes (--nodelist)")
	case mentions(in.Prefer, feature):
		exprErr = fmt.Errorf("the job's --prefer already asks for %s", feature)
	default:
		expr, exprErr = parseJobExpr(in.Constraint, in.Prefer, in.Prefix, in.Complete)
	}

	// count gives, for the expression x and the excluded nodes, the most
	// eligible nodes in one matching-OR alternative, and the most holders in
	// one alternative with room for the whole job, with that alternative.
	// The job may run in any of its partitions, so each must allow it: the
	// smallest over them counts. The holders are counted per alternative
	// first, because a counted preference names one alternative (see
	// countedPrefer) and must then hold in every partition.
	count := func(x *featureExpr, excl map[string]bool) (eligible, holders, alt int) {
		parts := in.Partitions
		if len(parts) == 0 {
			parts = []string{""}
		}
		eligible = -1
		perAlt := make([]int, x.alternatives())
		for a := range perAlt {
			perAlt[a] = -1
		}
		for _, p := range parts {
			bestE := 0
			for a := range perAlt {
				e, h := 0, 0
				for _, nd := range in.Cluster {
					if (p != "" && !slices.Contains(nd.Partitions, p)) || excl[nd.Name] || !x.match(nd.Features, a) {
						continue
					}
					e++
					if held[nd.Name] {
						h++
					}
				}
				bestE = max(bestE, e)
				if e < n {
					h = 0
				}
				if perAlt[a] < 0 || h < perAlt[a] {
					perAlt[a] = h
				}
			}
			if eligible < 0 || bestE < eligible {
				eligible = bestE
			}
		}
		for a, h := range perAlt {
			if h > holders {
				holders, alt = h, a
			}
		}
		return eligible, holders, alt
	}

	// An exclusion that leaves too few nodes would have Slurm reject the
	// job; without llmgw's it would have run (and fetched). So would one
	// that hits a node the job names, or one llmgw cannot check against the
	// job's expression: then it excludes nothing.
	excl := maps.Clone(userExcl)
	if len(ours) > 0 {
		if exprErr != nil {
			note("not excluding %s (no room for %s): %v", Compress(ours), in.Model, exprErr)
			ours = nil
		} else {
			trial := maps.Clone(userExcl)
			for _, x := range ours {
				trial[x] = true
			}
			if e, _, _ := count(expr, trial); e >= n {
				excl = trial
			} else {
				if base, _, _ := count(expr, userExcl); base >= n {
					note("not excluding %s (no room for %s): too few nodes would be left for %d", Compress(ours), in.Model, n)
				}
				ours = nil
			}
		}
	}
	if len(ours) > 0 {
		all := append(slices.Clone(in.Exclude), ours...)
		slices.Sort(all)
		out.Exclude = slices.Compact(all)
		note("excluding %s: no room for %s and not holding it", Compress(ours), in.Model)
	}

	if exprErr != nil {
		note("no preference for %s: %v", feature, exprErr)
		return out
	}
	_, k, alt := count(expr, excl)
	if k == 0 {
		note("no preference: no node in the job's partition holds %s (a preference nobody can meet would reject the job)", in.Model)
		return out
	}
	var prefer string
	switch {
	case n <= k:
		prefer = joinAnd(in.Constraint, in.Prefer, feature)
	case expr.root == nil:
		prefer = feature + "*" + strconv.Itoa(k)
	default:
		ands, err := expr.flatten(alt)
		if err != nil {
			note("no preference: %d of the job's %d nodes hold %s, and Slurm (from 23.02) takes a count beside other features only inside [...], where the job's expression cannot go (%v)", k, n, in.Model, err)
			return out
		}
		prefer = countedPrefer(ands, feature, k, n)
	}
	if nestedParens(prefer) {
		note("no preference: --prefer=%s puts parentheses inside parentheses, which Slurm refuses, rejecting the job", prefer)
		return out
	}
	if len(prefer) > MaxExpression {
		note("no preference: --prefer=%s… would be %d characters, over Slurm's limit of %d", prefer[:40], len(prefer), MaxExpression)
		return out
	}
	out.Prefer = prefer
	out.Holders = k
	note("preferring %d node(s) holding %s: --prefer=%s", min(k, n), in.Model, prefer)
	return out
}

// nestedParens reports whether expr has parentheses inside parentheses,
// as joinAnd makes of a user's expression that has its own beside an OR:
// ((ib-a&ib-b)|ib-a)&llmgw.m1. Slurm rejects the job at submit (22.05:
// "Invalid feature specification"; 24.11, 26.05: "Invalid preferred
// feature specification"), where without the preference it runs
// (TestSiteJobSubmitMatchesShipped, docs/slurm/behaviour.md §1).
func nestedParens(expr string) bool {
	depth := 0
	for _, r := range expr {
		switch r {
		case '(':
			if depth++; depth > 1 {
				return true
			}
		case ')':
			depth--
		}
	}
	return false
}

// hasToken reports whether comment has token as one of its words.
func hasToken(comment, token string) bool {
	return slices.Contains(strings.Fields(comment), token)
}

// joinAnd ANDs the non-empty parts, each of the user's in parentheses so &
// binds it whole (the last part, llmgw's term, needs none), except one
// holding a matching OR
// ("[ib-a|ib-b]"): Slurm does not keep a bracket inside parentheses a
// matching OR (seen on 22.05: -N2 --prefer='([ib-a|ib-b])&f*1' ran on one
// ib-a and one ib-b node), and parseJobExpr has already made sure such a
// part is an AND of terms, so it needs none.
func joinAnd(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		if i < len(parts)-1 && !strings.Contains(p, "[") {
			p = "(" + p + ")"
		}
		b.WriteString(p)
	}
	return b.String()
}

// countedPrefer is the preference for a job of n nodes of which only k can
// hold feature, when the job's own expression is the AND of ands (one
// matching-OR alternative already chosen): k holders and n-k other nodes,
// every one meeting ands, as
//
//	[(ib-b&llmgw.m3)*1&ib-b*1]
//
// Slurm from 23.02 refuses a count outside brackets in an expression of
// more than one feature (slurmctld's _feature_string2list, SchedMD commit
// 7f915cc63d: "'*' outside of brackets with more than one feature"), so the
// 22.05 form [ib-a|ib-b]&llmgw.m3*1 is rejected at submit on 24.11 and
// 26.05, and llmgw sbatch's retry without it let the job go to either
// fabric. Inside brackets the counted parts are picked one after the other,
// each from the nodes not picked yet (slurmctld's _get_req_features), and
// their counts must add up to the job's nodes; this form is placed on the
// holders' fabric, the holder included, on 22.05, 24.11 and 26.05
// (docs/slurm/RELEASES.md). The alternative is named rather than kept as a
// matching OR, since a bracket cannot hold another.
func countedPrefer(ands []string, feature string, k, n int) string {
	rest := strings.Join(ands, "&")
	if len(ands) > 1 {
		rest = "(" + rest + ")"
	}
	return fmt.Sprintf("[(%s&%s)*%d&%s*%d]", strings.Join(ands, "&"), feature, k, rest, n-k)
}

// mentions reports whether the expression expr names feature as a term.
func mentions(expr, feature string) bool {
	for _, t := range strings.FieldsFunc(expr, func(r rune) bool { return strings.ContainsRune("&|()[]*!", r) }) {
		if strings.TrimSpace(t) == feature {
			return true
		}
	}
	return false
}

// featureExpr is a parsed job feature expression: the AND of the user's
// constraint and preference, each a tree of features, & and | with
// parentheses, and at most one matching OR ("[a|b]") in all. Counts ("*"),
// negation and other syntax are not evaluated; parseJobExpr refuses them.
type featureExpr struct {
	root *exprNode // nil: no expression, every node matches
	alts int       // alternatives of the matching OR; 0 without one
}

type exprNode struct {
	op       byte // 'f' feature, '&', '|', '[' matching OR
	name     string
	children []*exprNode
}

// alternatives is how many ways the matching OR can be chosen (1 without one).
func (e *featureExpr) alternatives() int { return max(e.alts, 1) }

// flatten is the expression with the matching OR taken as alternative alt,
// as the features it ANDs (each once, in order), or an error when it holds
// an OR, which countedPrefer cannot put inside brackets.
func (e *featureExpr) flatten(alt int) ([]string, error) {
	var out []string
	var walk func(x *exprNode) error
	walk = func(x *exprNode) error {
		switch x.op {
		case 'f':
			if !slices.Contains(out, x.name) {
				out = append(out, x.name)
			}
		case '&':
			for _, c := range x.children {
				if err := walk(c); err != nil {
					return err
				}
			}
		case '[':
			return walk(x.children[alt])
		default:
			return fmt.Errorf("it has an OR (|) outside a matching OR")
		}
		return nil
	}
	if e.root == nil {
		return nil, nil
	}
	if err := walk(e.root); err != nil {
		return nil, err
	}
	return out, nil
}

// match reports whether a node with these features satisfies the
// expression when the matching OR takes alternative alt.
func (e *featureExpr) match(features []string, alt int) bool {
	if e.root == nil {
		return true
	}
	return e.root.eval(features, alt)
}

func (x *exprNode) eval(features []string, alt int) bool {
	switch x.op {
	case 'f':
		return slices.Contains(features, x.name)
	case '&':
		for _, c := range x.children {
			if !c.eval(features, alt) {
				return false
			}
		}
		return true
	case '|':
		for _, c := range x.children {
			if c.eval(features, alt) {
				return true
			}
		}
		return false
	case '[':
		return x.children[alt].eval(features, alt)
	}
	return false
}

// parseJobExpr parses the user's constraint and preference as one AND. With
// complete false only llmgw's own features are known, so an expression that
// names any other feature is refused.
func parseJobExpr(constraint, prefer, prefix string, complete bool) (*featureExpr, error) {
	e := &featureExpr{}
	var ands []*exprNode
	for _, s := range []struct{ flag, v string }{{"--constraint", constraint}, {"--prefer", prefer}} {
		if strings.TrimSpace(s.v) == "" {
			continue
		}
		p := &exprParser{s: s.v}
		node, err := p.parse(0, false)
		if err == nil && p.i < len(p.s) {
			err = fmt.Errorf("unexpected %q", p.s[p.i])
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read %s=%s (%v)", s.flag, s.v, err)
		}
		e.alts += p.alts
		if !complete {
			for _, f := range p.features {
				if !strings.HasPrefix(f, prefix) {
					return nil, fmt.Errorf("%s=%s names %s, and the feature file lists only llmgw's features (written by an older coordinator?)", s.flag, s.v, f)
				}
			}
		}
		ands = append(ands, node)
	}
	if strings.Count(constraint+prefer, "[") > 1 {
		return nil, fmt.Errorf("more than one matching OR ([...]) in --constraint and --prefer")
	}
	switch len(ands) {
	case 0:
	case 1:
		e.root = ands[0]
	default:
		e.root = &exprNode{op: '&', children: ands}
	}
	return e, nil
}

type exprParser struct {
	s        string
	i        int
	alts     int
	features []string
}

// parse reads terms joined by one operator until ')' or ']' or the end.
// depth > 0 inside parentheses or brackets; a matching OR is accepted only
// at depth 0 as a term of an AND (never inside parentheses: see joinAnd).
func (p *exprParser) parse(depth int, inBracket bool) (*exprNode, error) {
	var terms []*exprNode
	var op byte
	for {
		t, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)
		if p.i >= len(p.s) {
			break
		}
		c := p.s[p.i]
		if c == ')' || c == ']' {
			break
		}
		if c != '&' && c != '|' {
			return nil, fmt.Errorf("unexpected %q", c)
		}
		if op != 0 && op != c {
			return nil, fmt.Errorf("& and | mixed without parentheses")
		}
		op = c
		p.i++
	}
	if inBracket {
		if op == '&' {
			return nil, fmt.Errorf("a matching OR ([...]) joins alternatives with |")
		}
		p.alts = len(terms)
		return &exprNode{op: '[', children: terms}, nil
	}
	for _, t := range terms {
		if t.op == '[' && op == '|' {
			return nil, fmt.Errorf("a matching OR ([...]) inside an OR")
		}
	}
	if len(terms) == 1 {
		return terms[0], nil
	}
	return &exprNode{op: op, children: terms}, nil
}

func (p *exprParser) term(depth int) (*exprNode, error) {
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("missing a feature at the end")
	}
	switch c := p.s[p.i]; c {
	case '(', '[':
		if c == '[' && depth > 0 {
			return nil, fmt.Errorf("a matching OR ([...]) inside parentheses or brackets")
		}
		p.i++
		node, err := p.parse(depth+1, c == '[')
		if err != nil {
			return nil, err
		}
		want := byte(')')
		if c == '[' {
			want = ']'
		}
		if p.i >= len(p.s) || p.s[p.i] != want {
			return nil, fmt.Errorf("missing %q", want)
		}
		p.i++
		return node, nil
	}
	start := p.i
	for p.i < len(p.s) && !strings.ContainsRune("&|()[]", rune(p.s[p.i])) {
		p.i++
	}
	name := p.s[start:p.i]
	switch {
	case name == "":
		return nil, fmt.Errorf("missing a feature before %q", p.s[p.i])
	case strings.ContainsAny(name, "*!,"):
		// Counts, negation and lists change what a node set must hold
		// in ways a per-node test cannot follow.
		return nil, fmt.Errorf("%q uses a count, negation or list, which llmgw does not evaluate", name)
	}
	p.features = append(p.features, name)
	return &exprNode{op: 'f', name: name}, nil
}
