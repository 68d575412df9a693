package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// nobody is the uid and gid a spoke is inside its user namespace when the
// hub runs as root, and the uid every spoke ran as before each had its own:
// a spoke cannot read root's 0600 files even before Landlock, and has no
// capability at all.
const nobody = 65534

// IDRange is the host uids, and the gids of the same numbers, that a root
// hub gives its spokes: each live spoke one of its own, so that no file or
// process on the host belongs to two spokes. Inside its user namespace a
// spoke is still nobody (65534), mapped to its own id outside.
type IDRange struct {
	// First is the lowest id of the range.
	First uint32 `json:"first"`
	// Count is how many ids the range holds: at most that many spokes
	// live at once.
	Count uint32 `json:"count"`
}

// DefaultIDRange sits above the ranges that useradd (up to 60000), systemd
// (dynamic users up to 65519, containers up to 1879048191) and the usual
// /etc/subuid allocations (from 100000, 65536 each) hand out, and below
// 2^31, which some tools still read as a signed number. Check refuses it
// where a user, group or sub-id range of the machine overlaps it.
var DefaultIDRange = IDRange{First: 1_900_000_000, Count: 65536}

// idFiles are the files whose ids a spoke's id must never be, each with why.
// Sub-id files list ranges (name:first:count), the others one id each
// (name:x:id:…).
var idFiles = []struct {
	path, reason string
	sub          bool
}{
	{"/etc/passwd", "a user's uid: the spoke would own that user's files", false},
	{"/etc/group", "a group's gid: the spoke would read that group's files", false},
	{"/etc/subuid", "a user's subordinate uids: that user's containers would own the spoke's files", true},
	{"/etc/subgid", "a user's subordinate gids", true},
}

// Check returns why r cannot be the spokes' ids here: empty, too large, or
// overlapping an id that a user, group or sub-id range of the machine
// already uses.
func (r IDRange) Check() error {
	if r.Count == 0 {
		return fmt.Errorf("%w: the spoke id range is empty", ErrInvalidPolicy)
	}
	if uint64(r.First)+uint64(r.Count) > 1<<31 || r.First <= nobody {
		return fmt.Errorf("%w: the spoke id range %d+%d must lie above %d and below 2^31", ErrInvalidPolicy, r.First, r.Count, nobody)
	}
	for _, f := range idFiles {
		if err := r.checkFile(f.path, f.reason, f.sub); err != nil {
			return err
		}
	}
	return nil
}

// overlaps reports whether [first, first+count) meets r.
func (r IDRange) overlaps(first, count uint64) bool {
	return first < uint64(r.First)+uint64(r.Count) && uint64(r.First) < first+count
}

// checkFile reads one of idFiles: passwd and group carry an id in field 3,
// subuid and subgid a start and count in fields 2 and 3.
func (r IDRange) checkFile(path, reason string, sub bool) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), ":")
		first, count := uint64(0), uint64(1)
		switch {
		case sub && len(fields) >= 3:
			first, err = strconv.ParseUint(fields[1], 10, 32)
			if err == nil {
				count, err = strconv.ParseUint(fields[2], 10, 32)
			}
		case !sub && len(fields) >= 3:
			first, err = strconv.ParseUint(fields[2], 10, 32)
		default:
			continue
		}
		if err != nil {
			continue // not an entry (a comment, a NIS line)
		}
		if r.overlaps(first, count) {
			return fmt.Errorf("%w: the spoke id range %d+%d meets %s line %d (%s), which would be %s",
				ErrInvalidPolicy, r.First, r.Count, path, line, fields[0], reason)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	return nil
}
