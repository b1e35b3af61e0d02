package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/internal/atomicfile"
)

// A level mark is a file in the log's directory saying that the log holds
// (or is about to hold) entries only builds of a cluster level or later
// can read. It ends like a segment on purpose: builds from before cluster
// levels refuse to open a log directory holding a segment-like file they
// cannot parse ("unexpected file needs-cluster-level-1.seg"), so they stop
// before applying an entry they would panic on; later builds skip marks up
// to their own level and refuse the others by name.
const levelMarkPrefix = "needs-cluster-level-"

// levelMarkPath is the mark of level in dir.
func levelMarkPath(dir string, level uint32) string {
	return filepath.Join(dir, levelMarkPrefix+strconv.FormatUint(uint64(level), 10)+segmentSuffix)
}

// parseLevelMark returns the level a file name marks.
func parseLevelMark(name string) (uint32, bool) {
	s, ok := strings.CutPrefix(name, levelMarkPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, segmentSuffix)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	return uint32(v), true
}

// MarkedLevel returns the highest level marked in the log directory dir (0
// when none is, or the directory does not exist).
func MarkedLevel(dir string) (uint32, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raftlog: list %s: %w", dir, err)
	}
	var marked uint32
	for _, e := range ents {
		if l, ok := parseLevelMark(e.Name()); ok && !e.IsDir() {
			marked = max(marked, l)
		}
	}
	return marked, nil
}

// MarkLevel durably marks the log directory dir as needing level: the
// file and the directory entry are synced before it returns, so an entry
// appended afterwards is never on disk without its mark.
func MarkLevel(dir string, level uint32) error {
	path := levelMarkPath(dir, level)
	text := fmt.Sprintf("The cluster this log belongs to is at cluster level %d: only builds that speak level %d or later can read its entries.\n", level, level)
	if err := atomicfile.Write(path, []byte(text)); err != nil {
		return fmt.Errorf("raftlog: mark level %d in %s: %w", level, dir, err)
	}
	return nil
}
