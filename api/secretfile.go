package api

import "github.com/llmgw/llmgw/weights/catalog"

// CheckPrivate refuses a secret file (a token, a TLS key) that group or
// others may read, or that is owned by neither root nor the user reading
// it; see catalog.CheckPrivate, which the fetcher applies to the hub token
// too.
func CheckPrivate(what, path string) error { return catalog.CheckPrivate(what, path) }
