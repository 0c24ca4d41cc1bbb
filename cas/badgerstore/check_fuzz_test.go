package badgerstore

import "testing"

// FuzzCheckLog: the log reader takes any bytes without panicking, its
// replay stops within the log, and damage is reported where it stops.
func FuzzCheckLog(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add(append(make([]byte, logFileHeader), 0x40, 0, 3, 2, 0, 'k', 'e', 'y', 'v', 'v', 1, 2, 3, 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		end, stop := replayEnd(b)
		if len(b) >= logFileHeader && (end > stop || stop > len(b)) {
			t.Fatalf("replay end %d, stop %d, length %d", end, stop, len(b))
		}
		if d := checkLog("f", b); d != nil && d.Offset != int64(stop) {
			t.Fatalf("damage at %d, replay stops at %d", d.Offset, stop)
		}
	})
}
