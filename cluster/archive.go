package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ArchiveLevel is the cluster level from which a snapshot kept as a
// checkpoint is sent to a follower (and read at a restart whose store is
// behind) as the checkpoint's files, which the follower installs as its
// state store, rather than encoded record by record in the state
// machine's format and written into a new store by the follower again. A
// build of an earlier level cannot read such a snapshot, so none is sent
// before every member speaks this level. Backups stay in the state
// machine's format.
const ArchiveLevel = 4

// archiveMagic starts a snapshot that is a state store's files. What
// follows is, for each file, its name (a length as a uvarint, then the
// bytes), its size (a uvarint), its bytes and the CRC-32C of its name and
// bytes (4 bytes big-endian); then a name of length 0, the index of the
// last entry the store holds (8 bytes big-endian) and the CRC-32C of that
// index and of every file's CRC in order (4 bytes).
const archiveMagic = "HOLDFAST-STORE1\n"

// Bounds a received archive must keep; one past them is refused as
// damaged before anything is written for it.
const (
	maxArchiveName  = 255
	maxArchiveFiles = 1 << 20
	maxArchiveFile  = 1 << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// archiveFile is one file of a checkpoint being sent.
type archiveFile struct {
	name string
	f    *os.File
	size int64
}

// storeArchive is a checkpoint's files, open, for sending: the files of a
// snapshot may be removed (the snapshot store keeps only the newest ones)
// while they are read, and an open file stays readable.
type storeArchive struct {
	files   []archiveFile
	applied uint64
}

// openArchive opens every file of the checkpoint in dir, which holds the
// entries up to applied. A checkpoint is files only: a directory in it is
// refused.
func openArchive(dir string, applied uint64) (*storeArchive, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the checkpoint's files: %w", err)
	}
	a := &storeArchive{applied: applied}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			a.close()
			return nil, fmt.Errorf("the checkpoint holds %s, which is not a file", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			a.close()
			return nil, fmt.Errorf("open the checkpoint's files: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			a.close()
			return nil, fmt.Errorf("open the checkpoint's files: %w", err)
		}
		a.files = append(a.files, archiveFile{name: e.Name(), f: f, size: st.Size()})
	}
	return a, nil
}

func (a *storeArchive) close() {
	for _, f := range a.files {
		_ = f.f.Close()
	}
	a.files = nil
}

// size is the archive's length in bytes.
func (a *storeArchive) size() int64 {
	n := int64(len(archiveMagic))
	for _, f := range a.files {
		n += int64(uvarintLen(uint64(len(f.name)))) + int64(len(f.name)) + int64(uvarintLen(uint64(f.size))) + f.size + 4
	}
	return n + 1 + 8 + 4
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// writeTo writes the archive to w and closes its files. A file whose
// length changed since it was opened fails it.
func (a *storeArchive) writeTo(w io.Writer) error {
	defer a.close()
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(archiveMagic); err != nil {
		return err
	}
	sums := crc32.New(castagnoli)
	var head []byte
	for _, f := range a.files {
		head = binary.AppendUvarint(head[:0], uint64(len(f.name)))
		head = append(head, f.name...)
		head = binary.AppendUvarint(head, uint64(f.size))
		if _, err := bw.Write(head); err != nil {
			return err
		}
		h := crc32.New(castagnoli)
		_, _ = h.Write([]byte(f.name))
		n, err := io.Copy(io.MultiWriter(bw, h), io.NewSectionReader(f.f, 0, f.size))
		if err != nil {
			return fmt.Errorf("send %s: %w", f.name, err)
		}
		if n != f.size {
			return fmt.Errorf("send %s: it has %d bytes, %d were expected", f.name, n, f.size)
		}
		sum := binary.BigEndian.AppendUint32(nil, h.Sum32())
		_, _ = sums.Write(sum)
		if _, err := bw.Write(sum); err != nil {
			return err
		}
	}
	tail := binary.BigEndian.AppendUint64([]byte{0}, a.applied)
	_, _ = sums.Write(tail[1:])
	tail = binary.BigEndian.AppendUint32(tail, sums.Sum32())
	if _, err := bw.Write(tail); err != nil {
		return err
	}
	return bw.Flush()
}

// errArchive is wrapped by every error of an archive that is not whole.
var errArchive = errors.New("damaged store archive")

// isArchive reports whether head, a snapshot's first bytes, starts an
// archive.
func isArchive(head []byte) bool { return bytes.HasPrefix(head, []byte(archiveMagic)) }

// readArchive reads an archive from r, magic included, and writes its
// files into dir (when dir is "", it only checks them). It returns the
// index the store holds once the whole archive, its checksums and its end
// have been read; anything after the end is refused.
func readArchive(r io.Reader, dir string) (uint64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(archiveMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !isArchive(magic) {
		return 0, fmt.Errorf("%w: it does not start as one", errArchive)
	}
	sums := crc32.New(castagnoli)
	var seen []string
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errArchive, eof(err))
		}
		if n == 0 {
			break
		}
		if n > maxArchiveName || len(seen) >= maxArchiveFiles {
			return 0, fmt.Errorf("%w: a name of %d bytes, or more than %d files", errArchive, n, maxArchiveFiles)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return 0, fmt.Errorf("%w: %w", errArchive, eof(err))
		}
		if !archiveName(string(name)) || slices.Contains(seen, string(name)) {
			return 0, fmt.Errorf("%w: a file named %q", errArchive, name)
		}
		seen = append(seen, string(name))
		size, err := binary.ReadUvarint(br)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errArchive, eof(err))
		}
		if size > maxArchiveFile {
			return 0, fmt.Errorf("%w: %s is said to have %d bytes", errArchive, name, size)
		}
		sum, err := copyArchiveFile(br, dir, string(name), int64(size))
		if err != nil {
			return 0, err
		}
		var want [4]byte
		if _, err := io.ReadFull(br, want[:]); err != nil {
			return 0, fmt.Errorf("%w: %w", errArchive, eof(err))
		}
		if binary.BigEndian.Uint32(want[:]) != sum {
			return 0, fmt.Errorf("%w: %s fails its checksum", errArchive, name)
		}
		_, _ = sums.Write(want[:])
	}
	var tail [12]byte
	if _, err := io.ReadFull(br, tail[:]); err != nil {
		return 0, fmt.Errorf("%w: %w", errArchive, eof(err))
	}
	_, _ = sums.Write(tail[:8])
	if binary.BigEndian.Uint32(tail[8:]) != sums.Sum32() {
		return 0, fmt.Errorf("%w: its end fails its checksum", errArchive)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return 0, fmt.Errorf("%w: bytes follow its end", errArchive)
	}
	return binary.BigEndian.Uint64(tail[:8]), nil
}

// copyArchiveFile copies a file of size bytes from r into dir/name (or
// nowhere when dir is ""), returning its CRC-32C with its name.
func copyArchiveFile(r io.Reader, dir, name string, size int64) (uint32, error) {
	h := crc32.New(castagnoli)
	_, _ = h.Write([]byte(name))
	w := io.Writer(h)
	var f *os.File
	if dir != "" {
		var err error
		if f, err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return 0, fmt.Errorf("receive the store's files: %w", err)
		}
		w = io.MultiWriter(f, h)
	}
	_, err := io.CopyN(w, r, size)
	if err != nil && f == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: %s: %w", errArchive, name, eof(err))
	} else if err != nil {
		err = fmt.Errorf("receive %s: %w", name, err)
	}
	if f != nil {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("receive %s: %w", name, cerr)
		}
	}
	return h.Sum32(), err
}

// archiveName reports whether name can be a file of a store's directory:
// one path element, no dots alone, nothing hidden.
func archiveName(name string) bool {
	return name != "" && !strings.HasPrefix(name, ".") && !strings.ContainsAny(name, "/\\\x00") && filepath.Base(name) == name
}

// eof makes an early end of the stream an unexpected one.
func eof(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
