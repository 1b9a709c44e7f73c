//go:build !linux

package scan

import "fmt"

// Off Linux there is no statfs magic to read: everything is reported local,
// the conservative direction (see statfs_linux.go).

func fsKind(magic uint32) (string, bool) { return fmt.Sprintf("0x%x", magic), false }

func statfsMagic(string) (uint32, error) { return 0, nil }
