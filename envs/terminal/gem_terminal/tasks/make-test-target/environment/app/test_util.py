from util import reverse

assert reverse('abc') == 'cba', reverse('abc')
print('ok')
