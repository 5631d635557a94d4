// Helpers shared by the shm tests: a fresh temp folder, anonymous shared
// memory for results of forked children, and a fork wrapper whose child never
// returns into GoogleTest.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

namespace cushare::shm::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "cushare-shm-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Zeroed MAP_SHARED|MAP_ANONYMOUS memory holding a T, visible to forked children.
template <class T>
class SharedMem {
 public:
  SharedMem() {
    void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    ptr_ = static_cast<T*>(p);
  }
  ~SharedMem() { munmap(ptr_, sizeof(T)); }
  SharedMem(const SharedMem&) = delete;
  SharedMem& operator=(const SharedMem&) = delete;
  T* operator->() { return ptr_; }
  T& operator*() { return *ptr_; }

 private:
  T* ptr_;
};

// Runs `body` in a child process; the child exits with body's return value
// (or 99 on an exception) without running any of the parent's atexit code.
inline pid_t fork_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
    }
    _exit(rc);
  }
  return pid;
}

// Exit status of a child (-signal when killed by a signal).
inline int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1000;
}

}  // namespace cushare::shm::test
