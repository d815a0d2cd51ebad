package main

func readFile(ex *Exchange)  { refuse(ErrNoRoute, "no such route") }
func writeFile(ex *Exchange) { refuse(ErrNoRoute, "no such route") }
func zipDir(ex *Exchange)    { refuse(ErrNoRoute, "no such route") }
func fsStat(ex *Exchange)    { refuse(ErrNoRoute, "no such route") }
func fsList(ex *Exchange)    { refuse(ErrNoRoute, "no such route") }
func fsWatch(ex *Exchange)   { refuse(ErrNoRoute, "no such route") }
func fsMkdir(ex *Exchange)   { refuse(ErrNoRoute, "no such route") }
func fsMove(ex *Exchange)    { refuse(ErrNoRoute, "no such route") }
func fsRemove(ex *Exchange)  { refuse(ErrNoRoute, "no such route") }
