//go:build !linux

package main

import "errors"

// dropFileCache is Linux only (posix_fadvise).
func dropFileCache(string) error {
	return errors.New("dropping a file from the page cache: Linux only")
}
