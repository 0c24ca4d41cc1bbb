package fork

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// MaxLineSize bounds one rollout line. Codex writes tool output into its
// records, so lines of megabytes occur; a longer line is refused rather
// than held in memory.
const MaxLineSize = 64 << 20

// Record is one line of a rollout.
type Record struct {
	// Offset is the byte offset of the line's first byte in the file.
	Offset int64
	// Line is the line without its '\n'. It is valid until the next call
	// to Next.
	Line []byte
	// Damaged is set when the line is not a JSON object: it does not parse
	// as JSON, or parses as something else (an array, a string, nothing).
	Damaged bool
}

// RecordReader reads a JSON-lines rollout one record at a time, holding
// one line in memory. Lines are separated by '\n'; the bytes after the
// last '\n', if any, are a last line (a write cut short shows up there as
// a damaged record).
type RecordReader struct {
	r   *bufio.Reader
	off int64
	buf []byte
	max int
}

// NewRecordReader reads records from r.
func NewRecordReader(r io.Reader) *RecordReader {
	return &RecordReader{r: bufio.NewReaderSize(r, manifest.ChunkSize), max: MaxLineSize}
}

// Next returns the next record, io.EOF after the last, or an error wrapping
// ErrTooLarge for a line over MaxLineSize. A damaged record is returned
// like any other, with Damaged set: reading goes on after it.
func (rr *RecordReader) Next() (Record, error) {
	rr.buf = rr.buf[:0]
	for {
		frag, err := rr.r.ReadSlice('\n')
		if len(rr.buf)+len(frag) > rr.max+1 {
			return Record{}, fmt.Errorf("fork: rollout line at offset %d: over %d bytes: %w", rr.off, rr.max, ErrTooLarge)
		}
		rr.buf = append(rr.buf, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			if len(rr.buf) == 0 {
				return Record{}, io.EOF
			}
		} else if err != nil {
			return Record{}, err
		}
		break
	}
	rec := Record{Offset: rr.off, Line: bytes.TrimSuffix(rr.buf, []byte{'\n'})}
	rr.off += int64(len(rr.buf))
	rec.Damaged = !isJSONObject(rec.Line)
	return rec, nil
}

// isJSONObject reports whether line is exactly one JSON object, with
// optional surrounding white space.
func isJSONObject(line []byte) bool {
	t := bytes.TrimLeft(line, " \t\r")
	return len(t) > 0 && t[0] == '{' && json.Valid(line)
}

// RolloutInfo is what a full read of a rollout tells.
type RolloutInfo struct {
	Identity Identity
	// HasIdentity is false when no record within the provider's identity
	// window carried one.
	HasIdentity bool
	// Records counts the lines; FirstDamaged is the offset of the first
	// damaged one, -1 if none.
	Records      int64
	FirstDamaged int64
	// Through is the provider's reading of the last undamaged record.
	Through string
	Size    int64
}

// Damaged reports whether some line is not a JSON object.
func (ri *RolloutInfo) Damaged() bool { return ri.FirstDamaged >= 0 }

// ScanRollout reads the whole rollout e from the store, chunk by chunk,
// and reports its identity, whether it is damaged, and its last turn.
func ScanRollout(ctx context.Context, g cas.Getter, p Provider, e *manifest.Entry) (RolloutInfo, error) {
	return scan(ctx, g, p, e, false)
}

// ReadIdentity reads only the first records of rollout e, as many as the
// provider's identity window needs.
func ReadIdentity(ctx context.Context, g cas.Getter, p Provider, e *manifest.Entry) (RolloutInfo, error) {
	return scan(ctx, g, p, e, true)
}

func scan(ctx context.Context, g cas.Getter, p Provider, e *manifest.Entry, identityOnly bool) (RolloutInfo, error) {
	info := RolloutInfo{FirstDamaged: -1, Size: e.Size}
	c, err := OpenContent(ctx, g, e)
	if err != nil {
		return info, err
	}
	rr := NewRecordReader(c)
	var last []byte
	// The identity must come from intact records at the start: a damaged
	// one before it ends the search.
	searching := true
	for {
		rec, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, fmt.Errorf("fork: %s: %w", e.Name, err)
		}
		info.Records++
		if rec.Damaged {
			if info.FirstDamaged < 0 {
				info.FirstDamaged = rec.Offset
			}
			searching = false
		} else {
			last = append(last[:0], rec.Line...)
			if searching {
				id, ok, err := p.Identify(rec.Line)
				if err != nil {
					return info, fmt.Errorf("fork: %s: record %d: %w: %w", e.Name, info.Records, ErrDamaged, err)
				}
				info.Identity, info.HasIdentity = id, ok
				searching = !ok && info.Records < int64(p.IdentityWindow)
			}
		}
		if identityOnly && !searching {
			return info, nil
		}
	}
	if p.Through != nil && last != nil {
		info.Through = p.Through(last)
	}
	return info, nil
}

// lastRecord returns the last line of file e that is a JSON object, nil if
// there is none within the last 2*MaxLineSize bytes. It reads chunks from
// the end, so it costs the size of the last records, not of the file.
func lastRecord(ctx context.Context, g cas.Getter, e *manifest.Entry) ([]byte, error) {
	if e == nil || e.Size == 0 {
		return nil, nil
	}
	c, err := OpenContent(ctx, g, e)
	if err != nil {
		return nil, err
	}
	var tail []byte
	for i := c.list.Len() - 1; i >= 0 && len(tail) <= 2*MaxLineSize; i-- {
		b, err := c.Chunk(i)
		if err != nil {
			return nil, err
		}
		tail = append(append(make([]byte, 0, len(b)+len(tail)), b...), tail...)
		lines := bytes.Split(tail, []byte{'\n'})
		// lines[0] may be cut at its start unless the file starts there.
		first := 1
		if i == 0 {
			first = 0
		}
		for j := len(lines) - 1; j >= first; j-- {
			if isJSONObject(lines[j]) {
				return bytes.Clone(lines[j]), nil
			}
		}
	}
	return nil, nil
}
