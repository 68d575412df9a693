package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// maxCodeFiles bounds the files of an app's code trees: a declaration that
// names a tree larger than this (a whole disk) is refused, not hashed.
const maxCodeFiles = 100_000

// codeIdentity identifies the app's code and declaration: SHA-256 over
// every file the app can execute from what it declares (codeRoots: its
// command, its scripts and their package trees, its working directory, its
// read-only paths, the module paths of its environment) and the
// declaration as canonical JSON, which names secrets but holds none of
// their values. It enters the app's spec, so a grant given to one version
// of the app does not cover another: editing any of those files changes
// it. Files' hashes are cached by path, size, times and inode (fileHashes).
func (e ExternalApp) codeIdentity() (string, error) { return e.codeIdentityIn(nil) }

// codeIdentityIn is codeIdentity with the digests of trees already walked
// for other apps identified at the same moment (nil for none): apps that
// share one node_modules share its walk.
func (e ExternalApp) codeIdentityIn(walked map[string]string) (string, error) {
	h := sha256.New()
	io.WriteString(h, "secgpt external app v2\n")
	for _, root := range e.codeRoots() {
		sum, ok := walked[root]
		var err error
		if !ok {
			sum, err = fileHashes.tree(root)
		}
		if err != nil {
			return "", fmt.Errorf("failed to identify the code of app %s: %w", e.Name, err)
		}
		if walked != nil {
			walked[root] = sum
		}
		fmt.Fprintf(h, "root %q %s\n", root, sum)
	}
	decl, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("failed to encode the declaration of app %s: %w", e.Name, err)
	}
	h.Write(decl)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// tree returns the digest of every file under root (root itself if a
// file): their paths, modes and contents, and symbolic links' targets.
func (c *hashCache) tree(root string) (string, error) {
	h := sha256.New()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "link %q %q\n", path, target)
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		if files++; files > maxCodeFiles {
			return fmt.Errorf("more than %d files under %s: declare narrower paths", maxCodeFiles, root)
		}
		sum, mode, err := c.sum(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "file %q %o %s\n", path, mode, sum)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// codeRoots are the files and trees whose content is the app's code:
//   - its command;
//   - every argument naming a file (a script), with its package tree: the
//     outermost node_modules above it (every package Node may load), or
//     the nearest directory above it holding a package manifest
//     (package.json, pyproject.toml, setup.py, go.mod);
//   - its working directory, where `python -m` finds modules;
//   - its read-only paths;
//   - the directories of PYTHONPATH and NODE_PATH in its environment.
//
// A directory named in the arguments is data (the filesystem server's
// root), not code, and so are the paths in the user's scratch. Roots are
// sorted, and one inside another is dropped.
func (e ExternalApp) codeRoots() []string {
	roots := []string{e.Command}
	for _, arg := range e.Args {
		st, err := os.Stat(arg)
		if !filepath.IsAbs(arg) || err != nil || !st.Mode().IsRegular() {
			continue
		}
		roots = append(roots, filepath.Clean(arg))
		if pkg := packageTree(filepath.Clean(arg)); pkg != "" {
			roots = append(roots, pkg)
		}
	}
	if e.Dir != "" {
		roots = append(roots, e.Dir)
	}
	roots = append(roots, e.ReadOnly...)
	for _, v := range []string{"PYTHONPATH", "NODE_PATH"} {
		for _, p := range filepath.SplitList(e.Env[v]) {
			if st, err := os.Stat(p); filepath.IsAbs(p) && err == nil && st.IsDir() {
				roots = append(roots, filepath.Clean(p))
			}
		}
	}
	// A path in the user's scratch ("{scratch}/…") is that user's data.
	roots = slices.DeleteFunc(roots, func(r string) bool { return !filepath.IsAbs(r) })
	slices.Sort(roots)
	roots = slices.Compact(roots)
	var kept []string
	for _, r := range roots {
		if len(kept) > 0 && within(r, kept[len(kept)-1]) {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// manifests mark the root of a package.
var manifests = []string{"package.json", "pyproject.toml", "setup.py", "go.mod"}

// packageTree is the tree a script belongs to: the outermost node_modules
// on its path, else the nearest directory above it with a manifest, else
// "" (a lone script).
func packageTree(script string) string {
	parts := strings.Split(script, "/")
	for i, p := range parts[:len(parts)-1] {
		if p == "node_modules" && i > 0 {
			return strings.Join(parts[:i+1], "/")
		}
	}
	for dir := filepath.Dir(script); dir != "/"; dir = filepath.Dir(dir) {
		for _, m := range manifests {
			if _, err := os.Stat(filepath.Join(dir, m)); err == nil {
				return dir
			}
		}
	}
	return ""
}

// fileHashes is this process's cache of files' hashes, loaded from and
// saved to a file beside the database (load, save).
var fileHashes = newHashCache()

func newHashCache() *hashCache { return &hashCache{files: map[string]fileHash{}} }

// hashCache caches files' SHA-256 by path. An entry holds while the file's
// size, modification and change times and inode are the same: a write
// changes the change time, which no user can set back.
type hashCache struct {
	mu    sync.Mutex
	files map[string]fileHash
	dirty bool
}

type fileHash struct {
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"`
	CTime int64  `json:"ctime"`
	Ino   uint64 `json:"ino"`
	Sum   string `json:"sum"`
}

// sum returns the hash of path's content and its permission bits. A file
// whose stat matches its entry is not read.
func (c *hashCache) sum(path string) (string, fs.FileMode, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return "", 0, err
	}
	key, ok := statKey(st)
	if !ok {
		return "", 0, fmt.Errorf("failed to stat %s", path)
	}
	c.mu.Lock()
	cached, hit := c.files[path]
	c.mu.Unlock()
	if hit && cached.Size == key.Size && cached.MTime == key.MTime && cached.CTime == key.CTime && cached.Ino == key.Ino {
		return cached.Sum, st.Mode().Perm(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	// The entry is keyed by the stat of the file read, not of the path
	// a moment before.
	if st, err = f.Stat(); err != nil {
		return "", 0, err
	}
	if key, ok = statKey(st); !ok {
		return "", 0, fmt.Errorf("failed to stat %s", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", 0, err
	}
	key.Sum = hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	c.files[path], c.dirty = key, true
	c.mu.Unlock()
	return key.Sum, st.Mode().Perm(), nil
}

func statKey(st fs.FileInfo) (fileHash, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileHash{}, false
	}
	return fileHash{Size: st.Size(), MTime: sys.Mtim.Nano(), CTime: sys.Ctim.Nano(), Ino: sys.Ino}, true
}

// codeHashesFile is the cache file beside the database.
func codeHashesFile(database string) string {
	return filepath.Join(filepath.Dir(database), "code-hashes.json")
}

// load adds the entries of the cache file at path; a missing or damaged
// file is an empty cache.
func (c *hashCache) load(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var files map[string]fileHash
	if json.Unmarshal(b, &files) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, h := range files {
		if _, ok := c.files[p]; !ok {
			c.files[p] = h
		}
	}
}

// save writes the cache to path (atomically, 0600) if it changed.
func (c *hashCache) save(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return nil
	}
	b, err := json.Marshal(c.files)
	if err != nil {
		return fmt.Errorf("failed to encode code hashes: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("failed to save code hashes: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".code-hashes-*")
	if err != nil {
		return fmt.Errorf("failed to save code hashes: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("failed to save code hashes: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("failed to save code hashes: %w", err)
	}
	c.dirty = false
	return nil
}
