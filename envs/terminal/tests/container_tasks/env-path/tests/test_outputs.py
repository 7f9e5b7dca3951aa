"""The checker runs with the image's ENV, as the agent's shell does."""

import os
import subprocess
import sys


def test_the_image_s_python_and_variables():
    assert sys.prefix == "/opt/venv"  # the venv's python, first on the image's PATH
    assert os.environ["GREETING"] == "hello"


def test_answer():
    # `answer` is found on the image's PATH only
    printed = subprocess.run(["answer"], capture_output=True, text=True, check=True).stdout
    with open("/app/answer.txt") as f:
        assert f.read() == printed
