//go:build race

package stored

// raceEnabled: the race detector's runtime allocates on its own, so
// allocation counts are not checked under it.
const raceEnabled = true
