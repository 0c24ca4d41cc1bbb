package main

import "testing"

func TestThreadLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"192726\n", 192726},
		{"10001", 10001},
		{"10000\n", 0}, // Go's own default: nothing to raise
		{"4096\n", 0},  // below Go's default: the kernel refuses first
		{"", 0},
		{"lots\n", 0},
	} {
		if got := threadLimit(tc.in); got != tc.want {
			t.Errorf("threadLimit(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
