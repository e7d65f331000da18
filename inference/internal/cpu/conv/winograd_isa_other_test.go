//go:build !amd64

package conv

import "testing"

// withWinoISAs skips: there are no assembly transforms here.
func withWinoISAs(t *testing.T, f func(t *testing.T)) {
	t.Skip("no Winograd assembly on this architecture")
}
