#include <iostream>

#include "app/commands.hpp"

int main(int argc, char** argv) { return tandem::app::run(argc, argv, std::cout, std::cerr); }
