package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/server"
)

// snapshotCommand runs "holdfast snapshot <verb>".
func snapshotCommand(args []string, stdout, stderr io.Writer) int {
	return dispatch("snapshot", []subcommand{
		{"save", "save FILE: a consistent backup of the replicated state, taken on the leader (cluster key)", snapshotSave},
		{"inspect", "inspect FILE: check a backup and print its index, term, checksum, counts, fencing counter and the restore floor", snapshotInspect},
	}, args, stdout, stderr)
}

// maxBackupBytes bounds the backup snapshot save writes to its file.
const maxBackupBytes = 1 << 40

// printBackup prints what save and inspect report: the file, the backup's
// header, the snapshot's summary (the header and the summary share the
// fencing counter) and the restore floor a restore of it now would start
// from, as one JSON object.
func printBackup(stdout io.Writer, file string, b *cluster.Backup, sum fsm.SnapshotSummary) int {
	report := map[string]any{}
	for _, part := range []any{b.Header, sum} {
		raw, err := json.Marshal(part)
		if err != nil {
			return exitFailed
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber() // counters stay exact integers
		if err := d.Decode(&report); err != nil {
			return exitFailed
		}
	}
	report["file"] = file
	report["restore_floor"] = cluster.RestoreFloor(sum.FencingCounter, time.Now())
	out, err := json.Marshal(report)
	if err != nil {
		return exitFailed
	}
	fmt.Fprintln(stdout, string(out))
	return exitOK
}

// fileArg parses exactly one FILE argument with flags before or after it.
func fileArg(name string, args []string, stderr io.Writer, register func(fs *flag.FlagSet)) (string, int, bool) {
	fs := newFlags(name, stderr)
	if register != nil {
		register(fs)
	}
	var files []string
	quietUsage(fs, args)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", exitOK, false
			}
			return "", exitUsage, false
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "holdfast %s: want exactly one FILE argument, got %d %q\n", name, len(files), files)
		return "", exitUsage, false
	}
	return files[0], 0, true
}

func snapshotSave(args []string, stdout, stderr io.Writer) int {
	var o *clientOpts
	var force bool
	file, code, ok := fileArg("snapshot save", args, stderr, func(fs *flag.FlagSet) {
		o = addConnFlags(fs)
		o.clusterKey = clusterKeyFlag(fs)
		fs.BoolVar(&force, "force", false, "replace FILE if it exists")
	})
	if !ok {
		return code
	}
	if _, err := os.Lstat(file); err == nil && !force {
		return usageError(stderr, "snapshot save", fmt.Errorf("%s exists: give another FILE, or --force to replace it", file))
	}
	cl, err := o.client()
	if err != nil {
		return usageError(stderr, "snapshot save", err)
	}
	defer cl.CloseIdle()
	// The answer goes to a temporary file beside FILE as it arrives (a
	// backup can be larger than memory), is checked there, and only then
	// becomes FILE.
	var (
		resp *client.Response
		b    *cluster.Backup
		sum  fsm.SnapshotSummary
		exit = -1
	)
	err = atomicfile.WriteFrom(file, func(f *os.File) error {
		var err error
		resp, err = cl.Do(context.Background(), client.Request{Method: http.MethodGet, Path: server.BackupPath, Operator: true, Repeatable: true,
			MaxBody: maxBackupBytes, Into: fileSink{f}})
		if err != nil {
			exit = errExit(stderr, "snapshot save", err)
			return err
		}
		if !resp.OK() {
			exit = printAnswer(io.Discard, stderr, "snapshot save", "", false, resp)
			return errors.New("refused")
		}
		if b, sum, err = cluster.ReadBackupFile(f.Name()); err != nil {
			fmt.Fprintf(stderr, "holdfast snapshot save: the node's answer: %v\n", err)
			exit = exitFailed
		}
		return err
	})
	if exit >= 0 {
		return exit
	}
	if err != nil {
		fmt.Fprintf(stderr, "holdfast snapshot save: %v\n", err)
		return exitFailed
	}
	return printBackup(stdout, file, b, sum)
}

// fileSink keeps a streamed answer in a file, from its start again when
// an attempt is repeated.
type fileSink struct{ f *os.File }

func (s fileSink) Write(p []byte) (int, error) { return s.f.Write(p) }

func (s fileSink) Reset() error {
	if err := s.f.Truncate(0); err != nil {
		return err
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return err
}

func snapshotInspect(args []string, stdout, stderr io.Writer) int {
	file, code, ok := fileArg("snapshot inspect", args, stderr, nil)
	if !ok {
		return code
	}
	b, sum, err := cluster.ReadBackupFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "holdfast snapshot inspect: %v\n", err)
		return exitFailed
	}
	return printBackup(stdout, file, b, sum)
}
