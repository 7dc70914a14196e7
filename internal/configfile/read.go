package configfile

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// ReadTimeout is how long ReadFileContext's callers in spannerme wait for a read when they
// are given no deadline of their own (LoadConfig; a watcher's WatchOptions.ReadTimeout
// defaults to it).
const ReadTimeout = 10 * time.Second

// ReadFile reads the file at path, at most MaxSize bytes, and returns its content with its
// size and modification time as the opened file had them. It refuses, with an *Error naming
// the kind ("a named pipe (FIFO)", "a directory", "a socket", "a character device", ...),
// anything but a regular file or a symlink to one, before opening it and again on what it
// opened (the path may be replaced in between). It opens without blocking (O_NONBLOCK where
// the system has it), so a named pipe without a writer does not hold it. A file larger than
// MaxSize is an *Error. Other errors are the operating system's (wrapping fs.ErrNotExist for
// a missing file). Reading a regular file on a stuck network or FUSE file system can still
// block: ReadFileContext bounds that.
func ReadFile(path string) ([]byte, os.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(fi); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, nil, err
	}
	if err := checkRegular(fi); err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > MaxSize {
		return nil, nil, &Error{Problem: fmt.Sprintf("larger than %d bytes", MaxSize)}
	}
	return data, fi, nil
}

// ReadFileContext is ReadFile bounded by ctx: it returns when the read has finished or ctx
// has ended, whichever comes first, then with an error that wraps ctx's error and says the
// read did not finish. A read that outlives ctx goes on in its own goroutine until the
// operating system returns, and closes the file then; nothing else waits for it. Safe for
// concurrent use.
func ReadFileContext(ctx context.Context, path string) ([]byte, os.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	type result struct {
		data []byte
		fi   os.FileInfo
		err  error
	}
	done := make(chan result, 1) // never blocks the reader, whoever has stopped waiting
	go func() {
		data, fi, err := ReadFile(path)
		done <- result{data, fi, err}
	}()
	select {
	case r := <-done:
		return r.data, r.fi, r.err
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("reading %s did not finish in time: %w", path, context.Cause(ctx))
	}
}

// checkRegular returns the *Error of a file that is not a regular file, naming its kind.
func checkRegular(fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return &Error{Problem: fmt.Sprintf("not a regular file but %s: a configuration file must be a regular file (or a symlink to one)", KindOfFile(fi.Mode()))}
}

// KindOfFile names the kind of file that mode describes: "a regular file", "a directory",
// "a named pipe (FIFO)", "a socket", "a character device", "a block device", "a symlink",
// or "an irregular file".
func KindOfFile(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "an irregular file"
}
