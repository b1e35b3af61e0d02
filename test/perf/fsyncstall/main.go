//go:build linux

package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

const (
	appendSize  = 16 << 10
	logFileSize = 64 << 20
	writeSize   = 64 << 10
)

func main() {
	dir := flag.String("dir", ".", "directory for the two files (removed at the end)")
	mode := flag.String("mode", "plain", "how the big file is written: plain, sync or range")
	size := flag.Int64("size", 100, "MiB of the big file")
	every := flag.Int64("every", 4, "MiB between the big file's syncs (sync) or writeback starts (range)")
	flag.Parse()
	if *mode != "plain" && *mode != "sync" && *mode != "range" {
		fail(fmt.Errorf("-mode must be plain, sync or range, not %q", *mode))
	}
	if *size < 1 || *every < 1 {
		fail(fmt.Errorf("-size and -every must be at least 1"))
	}
	before, during, took, err := run(*dir, *mode, *size<<20, *every<<20)
	if err != nil {
		fail(err)
	}
	fmt.Printf("mode %s: %d MiB written and synced in %v\n", *mode, *size, took.Round(time.Millisecond))
	report("appends' fdatasync, before", before)
	report("appends' fdatasync, from the big write on", during)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fsyncstall:", err)
	os.Exit(2)
}

// run measures the appends before and during the big write; it returns
// their latencies and how long the big write took.
func run(dir, mode string, size, every int64) (before, during []time.Duration, took time.Duration, err error) {
	logPath, bigPath := filepath.Join(dir, "fsyncstall-log.bin"), filepath.Join(dir, "fsyncstall-big.bin")
	defer os.Remove(logPath)
	defer os.Remove(bigPath)
	lf, err := os.OpenFile(logPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("create the log file: %w", err)
	}
	defer lf.Close()
	if _, err := lf.WriteAt(make([]byte, logFileSize), 0); err != nil {
		return nil, nil, 0, fmt.Errorf("zero the log file: %w", err)
	}
	if err := lf.Sync(); err != nil {
		return nil, nil, 0, fmt.Errorf("sync the log file: %w", err)
	}
	time.Sleep(time.Second) // let the disk settle after the log file's zeros

	type sample struct {
		at  time.Time
		lat time.Duration
	}
	samples := make(chan []sample)
	stop := make(chan struct{})
	go func() {
		var got []sample
		buf := make([]byte, appendSize)
		for off := int64(0); ; off = (off + appendSize) % logFileSize {
			select {
			case <-stop:
				samples <- got
				return
			default:
			}
			t := time.Now()
			if _, err := lf.WriteAt(buf, off); err == nil {
				_ = syscall.Fdatasync(int(lf.Fd()))
			}
			got = append(got, sample{t, time.Since(t)})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	start := time.Now()
	werr := writeBig(bigPath, mode, size, every)
	took = time.Since(start)
	time.Sleep(time.Second)
	close(stop)
	for _, s := range <-samples {
		if s.at.Before(start) {
			before = append(before, s.lat)
		} else {
			during = append(during, s.lat)
		}
	}
	return before, during, took, werr
}

// writeBig writes size bytes to path in writeSize writes, as mode says,
// and syncs it.
func writeBig(path, mode string, size, every int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create the big file: %w", err)
	}
	defer f.Close()
	chunk := make([]byte, writeSize)
	for w := int64(0); w < size; {
		if _, err := f.Write(chunk); err != nil {
			return fmt.Errorf("write the big file: %w", err)
		}
		w += writeSize
		if w%every != 0 {
			continue
		}
		switch mode {
		case "sync":
			err = syscall.Fdatasync(int(f.Fd()))
		case "range":
			err = syscall.SyncFileRange(int(f.Fd()), w-every, every, 2) // SYNC_FILE_RANGE_WRITE
		}
		if err != nil {
			return fmt.Errorf("sync part of the big file: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync the big file: %w", err)
	}
	return nil
}

func report(what string, lat []time.Duration) {
	if len(lat) == 0 {
		fmt.Printf("%s: no samples\n", what)
		return
	}
	slices.Sort(lat)
	pct := func(p int) time.Duration { return lat[min(len(lat)-1, len(lat)*p/100)].Round(10 * time.Microsecond) }
	fmt.Printf("%s: %d, p50 %v, p99 %v, max %v\n", what, len(lat), pct(50), pct(99), lat[len(lat)-1].Round(10*time.Microsecond))
}
