//go:build !race

package stored

const raceEnabled = false
