package slurm

import "fmt"

// MaxNodeName bounds a node name. Slurm's own limit is higher, but a name
// this long is a mistake, and names reach logs, tables and hostlists.
const MaxNodeName = 128

// ValidNodeName says why name cannot be a node name, or nil.
//
// Node and fabric names become parts of hostlists, feature names and table
// cells; letters, digits, '.', '_' and '-' cover every Slurm NodeName seen in
// practice while keeping out separators (",", "[", "]") and whitespace.
// The rule lives here, in a standard-library leaf, because the agent's
// configuration checks it and the hook binary links that configuration.
func ValidNodeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("node name is empty")
	case len(name) > MaxNodeName:
		return fmt.Errorf("node name %.40q… is %d characters; the limit is %d", name, len(name), MaxNodeName)
	case !nodeNameChars(name):
		return fmt.Errorf("node name %q may contain only letters, digits, '.', '_' and '-', and must start with a letter or digit", name)
	}
	return nil
}

// nodeNameChars is ^[A-Za-z0-9][A-Za-z0-9._-]*$.
func nodeNameChars(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// ValidFabricName says why name cannot be a fabric name, or nil. Fabrics
// follow the node-name rule: they appear in the same places.
func ValidFabricName(name string) error {
	if err := ValidNodeName(name); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return nil
}
