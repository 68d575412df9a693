//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Landlock access sets. None grants EXECUTE but execFile: in ProfileStrict the
// spoke can execute nothing even if seccomp were off.
const (
	readFile landlock.AccessFSSet = ll.AccessFSReadFile
	readDir  landlock.AccessFSSet = ll.AccessFSReadFile | ll.AccessFSReadDir
	execFile landlock.AccessFSSet = ll.AccessFSReadFile | ll.AccessFSExecute
	// scratchDir is read and write without EXECUTE, devices, sockets, fifos,
	// symlinks. REFER (renames and links between directories) is added by
	// applyLandlock only where the kernel has it (ABI 2): go-landlock's best
	// effort turns a rule with REFER into no restriction at all on ABI 1
	// kernels, where such renames fail with EXDEV.
	scratchDir landlock.AccessFSSet = readDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSRemoveFile | ll.AccessFSRemoveDir
)

// systemPaths are what every exec-profile program may read beyond its own
// files: what the dynamic loader and interpreters read as they start. All
// are world-readable system files that hold no secret; none is writable or
// executable. Paths this machine lacks are skipped.
var systemPaths = []struct{ path, reason string }{
	{"/etc/ld.so.cache", "the dynamic loader's cache"},
	{"/lib", "system libraries (the dynamic loader maps them; never executable by a path)"},
	{"/lib64", "system libraries"},
	{"/usr", "system libraries and interpreters' standard libraries and data (CPython's /usr/lib/python3.*, Node's modules, /usr/share/zoneinfo)"},
	{"/etc/ssl/openssl.cnf", "OpenSSL's configuration: Node and CPython's ssl module load it at start and Node exits without it"},
	{"/etc/ssl/certs", "the public CA certificates; never /etc/ssl/private, which a hub in group ssl-cert could read"},
	{"/etc/localtime", "the local time zone"},
}

// landlockSupport reports the kernel's Landlock ABI version.
func landlockSupport() (int, string) {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Sprintf("not available: %v", err)
	}
	if abi < 1 {
		return 0, "not enabled in the kernel"
	}
	return abi, fmt.Sprintf("kernel ABI %d, enforced best effort up to V11", abi)
}

// landlockPaths is what one spoke may touch, by access set.
type landlockPaths struct {
	ReadFiles []string
	ReadDirs  []string
	Exec      []string
	Scratch   string
	// WriteDirs and WriteFiles are the declared read-write paths.
	WriteDirs, WriteFiles []string
	// ConnectTCP are the TCP ports the process may connect to.
	ConnectTCP []uint16
	// SendUDP are the UDP ports the process may connect or send to.
	SendUDP []uint16
}

// landlockRules computes the paths of policy p, mapped being the files the
// process maps (mappedFiles). Paths are looked up under host, where the
// host's root is ("" before the view, hostMount in its skeleton), so it
// must run before Landlock is applied and before the view is finished.
func landlockRules(p Policy, mapped []string, host string) (landlockPaths, error) {
	var lp landlockPaths
	lp.ReadFiles = slices.Clone(mapped)
	for _, path := range p.ReadOnly {
		st, err := os.Stat(host + path)
		if err != nil {
			return lp, fmt.Errorf("failed to stat read-only path: %w", err)
		}
		if st.IsDir() {
			lp.ReadDirs = append(lp.ReadDirs, path)
		} else {
			lp.ReadFiles = append(lp.ReadFiles, path)
		}
	}
	for _, path := range p.ReadWrite {
		st, err := os.Stat(host + path)
		if err != nil {
			return lp, fmt.Errorf("failed to stat read-write path: %w", err)
		}
		if st.IsDir() {
			lp.WriteDirs = append(lp.WriteDirs, path)
		} else {
			lp.WriteFiles = append(lp.WriteFiles, path)
		}
	}
	if p.Scratch != "" {
		st, err := os.Lstat(host + p.Scratch)
		if err != nil {
			return lp, fmt.Errorf("failed to stat scratch: %w", err)
		}
		if !st.IsDir() {
			return lp, fmt.Errorf("%w: scratch %s is not a directory", ErrInvalidPolicy, p.Scratch)
		}
		lp.Scratch = p.Scratch
	}
	if p.Profile == ProfileExecNet {
		lp.ConnectTCP = append([]uint16{p.ProxyPort}, TransparentTCPPorts...)
		lp.SendUDP = []uint16{ResolverPort}
	}
	if p.Profile.executes() {
		interp, err := elfInterpreter(host, p.ExecPath)
		if err != nil {
			return lp, err
		}
		lp.Exec = append(lp.Exec, p.ExecPath)
		if interp != "" {
			lp.Exec = append(lp.Exec, interp)
		}
		for _, sp := range systemPaths {
			path := sp.path
			st, err := os.Stat(host + path)
			switch {
			case errors.Is(err, os.ErrNotExist):
				continue
			case err != nil:
				return lp, fmt.Errorf("failed to stat system library path: %w", err)
			case st.IsDir():
				lp.ReadDirs = append(lp.ReadDirs, path)
			default:
				lp.ReadFiles = append(lp.ReadFiles, path)
			}
		}
	}
	return lp, nil
}

// mappedFiles lists the files mapped into this process (the executable and
// its shared libraries), from /proc/self/maps, that it may read now. One it
// cannot read (a binary in a directory only root may enter, started through
// /proc/self/exe) stays unreadable: the spoke does not need to read what is
// already mapped.
func mappedFiles() ([]string, error) {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("failed to read /proc/self/maps: %w", err)
	}
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 || !strings.HasPrefix(fields[5], "/") {
			continue // anonymous, [heap], [stack], or " (deleted)"
		}
		if !slices.Contains(files, fields[5]) && unix.Access(fields[5], unix.R_OK) == nil {
			files = append(files, fields[5])
		}
	}
	return files, nil
}

// elfInterpreter returns the ELF interpreter (PT_INTERP) of path, read
// under host (see landlockRules), "" for a static executable. The kernel opens the interpreter for execution, so it
// needs EXECUTE too. Scripts are refused: their interpreter would need
// EXECUTE and could run anything.
func elfInterpreter(host, path string) (string, error) {
	f, err := elf.Open(host + path)
	if err != nil {
		return "", fmt.Errorf("%w: exec_path %s is not an ELF executable (declare the interpreter of a script instead): %w", ErrInvalidPolicy, path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("failed to read ELF interpreter of %s: %w", path, err)
		}
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	return "", nil
}

// applyLandlock restricts every thread of the process to lp, handling every
// access right go-landlock knows (V11) that the kernel supports: file
// access, TCP and UDP bind/connect (no port is allowed but lp.ConnectTCP and
// lp.SendUDP),
// and the abstract unix socket and signal scopes.
func applyLandlock(lp landlockPaths) (string, error) {
	rules := []landlock.Rule{landlock.PathAccess(readFile, lp.ReadFiles...)}
	if len(lp.ReadDirs) > 0 {
		rules = append(rules, landlock.PathAccess(readDir, lp.ReadDirs...))
	}
	if len(lp.Exec) > 0 {
		rules = append(rules, landlock.PathAccess(execFile, lp.Exec...))
	}
	writable := scratchDir
	if abi, _ := landlockSupport(); abi >= 2 {
		// Renames and links between directories of scratch (a file
		// written in TMPDIR and moved into XDG_DATA_HOME); only where
		// the kernel knows REFER, see scratchDir.
		writable |= ll.AccessFSRefer
	}
	if dirs := slices.DeleteFunc(append([]string{lp.Scratch}, lp.WriteDirs...), func(s string) bool { return s == "" }); len(dirs) > 0 {
		rules = append(rules, landlock.PathAccess(writable, dirs...))
	}
	if len(lp.WriteFiles) > 0 {
		rules = append(rules, landlock.PathAccess(readFile|ll.AccessFSWriteFile|ll.AccessFSTruncate, lp.WriteFiles...))
	}
	for _, port := range lp.ConnectTCP {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	for _, port := range lp.SendUDP {
		rules = append(rules, landlock.ConnectSendUDP(port))
	}
	if err := landlock.V11.BestEffort().Restrict(rules...); err != nil {
		return "", fmt.Errorf("failed to apply landlock: %w", err)
	}
	abi, _ := landlockSupport()
	return landlockDetail(abi, lp), nil
}

// landlockDetail describes the domain of lp for the report.
func landlockDetail(abi int, lp landlockPaths) string {
	detail := fmt.Sprintf("ABI %d; %d read-only files, %d read-only dirs, %d executable, scratch %q, %d more read-write",
		abi, len(lp.ReadFiles), len(lp.ReadDirs), len(lp.Exec), lp.Scratch, len(lp.WriteDirs)+len(lp.WriteFiles))
	if len(lp.ConnectTCP) > 0 {
		detail += fmt.Sprintf(", TCP connect to ports %v only, UDP to %v only", lp.ConnectTCP, lp.SendUDP)
	}
	return detail
}

// landlockRuleset is a Landlock ruleset made ahead of its policy, by a
// spare before its claim, holding what applyLandlock's would hold for every
// policy a spare may become (SpareCanBecome): the files the process maps,
// read-only, and its threads' list, which the C libpsx reads after each
// enforcement (go-landlock's workaround for its issue 39; see
// psxListsTasks). At the claim
// only the scratch's rule is added, and every thread restricted in one
// psx round: they still hold CAP_SYS_ADMIN over their own namespaces, which
// landlock_restrict_self takes in place of no_new_privs, so no round sets
// that first (Enter drops the capability, then sets no_new_privs, next).
// The access rights are go-landlock's V11 best effort on this kernel's
// ABI, as applyLandlock's.
type landlockRuleset struct {
	fd, abi   int
	handledFS uint64
	mapped    []string
}

// handledLandlock are the access rights and scopes a ruleset handles on
// Landlock ABI abi: those of go-landlock's V11 the kernel knows (ABI 2
// added REFER, 3 TRUNCATE, 4 TCP, 5 IOCTL_DEV, 6 the scopes, 9 RESOLVE_UNIX,
// 10 UDP).
func handledLandlock(abi int) (fs, net, scoped uint64) {
	switch {
	case abi >= 9:
		fs = 1<<17 - 1
	case abi >= 5:
		fs = 1<<16 - 1
	case abi >= 3:
		fs = 1<<15 - 1
	case abi == 2:
		fs = 1<<14 - 1
	default:
		fs = 1<<13 - 1
	}
	switch {
	case abi >= 10:
		net = 1<<4 - 1
	case abi >= 4:
		net = 1<<2 - 1
	}
	if abi >= 6 {
		scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	return fs, net, scoped
}

// prepareLandlock makes the ruleset of a spare whose files mapped are in
// its view. It returns nil, and applyLandlock serves the claim, on a
// kernel whose Landlock restricts every thread in one call (ABI 8,
// TSYNC), as go-landlock does there.
func prepareLandlock(abi int, mapped []string) (*landlockRuleset, error) {
	if abi < 1 || abi >= 8 {
		return nil, nil
	}
	fs, net, scoped := handledLandlock(abi)
	attr := ll.RulesetAttr{HandledAccessFS: fs, HandledAccessNet: net, Scoped: scoped}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to create the landlock ruleset: %w", err)
	}
	r := &landlockRuleset{fd: fd, abi: abi, handledFS: fs, mapped: mapped}
	for _, path := range mapped {
		if err := r.add(path, uint64(readFile)); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	// Only where go-landlock adds it: the Go fallback of a build without
	// cgo lists nothing.
	if psxListsTasks {
		if err := r.add(fmt.Sprintf("/proc/%d/task", os.Getpid()), ll.AccessFSReadDir); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return r, nil
}

// add grants access, within what the ruleset handles, beneath path.
func (r *landlockRuleset) add(path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to open %s for landlock: %w", path, err)
	}
	defer unix.Close(fd)
	attr := ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: access & r.handledFS}
	if err := ll.LandlockAddPathBeneathRule(r.fd, &attr, 0); err != nil {
		return fmt.Errorf("failed to add the landlock rule for %s: %w", path, err)
	}
	return nil
}

// restrict adds lp's scratch to the ruleset and restricts every thread of
// the process to it; the ruleset is closed after. lp may hold nothing else
// but the mapped files, as a spare's policy does not.
func (r *landlockRuleset) restrict(lp landlockPaths) (string, error) {
	defer unix.Close(r.fd)
	if !slices.Equal(lp.ReadFiles, r.mapped) || len(lp.ReadDirs)+len(lp.Exec)+len(lp.WriteDirs)+len(lp.WriteFiles)+len(lp.ConnectTCP)+len(lp.SendUDP) > 0 {
		return "", fmt.Errorf("%w: the policy's paths do not fit a spare's landlock ruleset", ErrInvalidPolicy)
	}
	if lp.Scratch != "" {
		writable := uint64(scratchDir)
		if r.abi >= 2 {
			writable |= ll.AccessFSRefer // see applyLandlock
		}
		if err := r.add(lp.Scratch, writable); err != nil {
			return "", err
		}
	}
	if err := ll.AllThreadsLandlockRestrictSelf(r.fd, 0); err != nil {
		return "", fmt.Errorf("failed to apply landlock: %w", err)
	}
	return landlockDetail(r.abi, lp), nil
}
