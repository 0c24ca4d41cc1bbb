//go:build !race

package uring

// kernelReply and kernelRequest mark, for the race detector, the order the
// kernel gives a reply and the requests that follow it (kernelorder_race.go);
// without the detector they do nothing.
func kernelReply()   {}
func kernelRequest() {}
