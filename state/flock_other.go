//go:build !unix

package state

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("lock held by another process")

func flock(*os.File, bool) error { return errors.ErrUnsupported }
func funlock(*os.File) error     { return errors.ErrUnsupported }
func processAlive(int) bool      { return true }
