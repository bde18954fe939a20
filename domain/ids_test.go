package domain

import "testing"

// TestBlockEmission reads the emission out of block ids as CreateEmission
// names them, and reads nothing out of anything else.
func TestBlockEmission(t *testing.T) {
	for block, want := range map[string]string{
		"E0001-B001": "E0001", "E0012-B1000": "E0012", "E0001-B001-B002": "E0001-B001",
		"E0001": "", "-B001": "", "E0001-B": "", "E0001-Bx": "", "E0001-B-1": "", "E0001-B99999999999": "",
	} {
		got, ok := BlockEmission(block)
		if got != want || ok != (want != "") {
			t.Errorf("BlockEmission(%q) = %q, %t; want %q", block, got, ok, want)
		}
	}
}
