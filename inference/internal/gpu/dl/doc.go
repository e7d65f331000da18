// Package dl loads shared libraries at run time (dlopen) and resolves their
// symbols, so that GPU libraries such as cuDNN need not be present
// when the program is built.
//
// It is only functional in builds with the cuda tag on linux with cgo; elsewhere
// Open returns an error.
package dl
