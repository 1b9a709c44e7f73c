package agent

import (
	"testing"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/evict"
)

// nodeconf spells eviction's defaults again, since the hook binary links
// it and must not link the eviction code; they must stay equal.
func TestEvictDefaultsSpelledAlike(t *testing.T) {
	if nodeconf.DefaultCacheHigh != evict.DefaultHigh || nodeconf.DefaultCacheLow != evict.DefaultLow || nodeconf.DefaultKeepLastCopyFor != evict.DefaultKeepLastCopyFor {
		t.Errorf("nodeconf's eviction defaults (%d, %d, %s) differ from weights/evict's (%d, %d, %s)",
			nodeconf.DefaultCacheHigh, nodeconf.DefaultCacheLow, nodeconf.DefaultKeepLastCopyFor, evict.DefaultHigh, evict.DefaultLow, evict.DefaultKeepLastCopyFor)
	}
}
