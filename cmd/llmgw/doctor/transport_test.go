package doctor

import "testing"

// TestPlainHTTPCoordinatorIsAnError: a node that reaches its coordinator
// over plain HTTP beyond loopback can only do so because the coordinator
// runs with insecure_http = true, and the doctor says that is an error.
func TestPlainHTTPCoordinatorIsAnError(t *testing.T) {
	for url, wantError := range map[string]bool{
		"http://coord.example:8420": true,
		"http://10.1.2.3:8420":      true,
		"https://coord.example":     false,
		"http://127.0.0.1:8420":     false,
		"http://[::1]:8420":         false,
		"http://localhost:8420":     false,
		"":                          false,
	} {
		fs := checkTransport(Options{Coordinator: url})
		got := len(fs) == 1 && fs[0].Severity == Error
		if got != wantError || (got && fs[0].Fix == "") {
			t.Errorf("checkTransport(%q) = %+v; want an error: %v", url, fs, wantError)
		}
	}
}
